import t from 'tap';
import { FailureObserver } from '../../src/roles/scheduler/notifications/failure-observer.js';
import type { ClusterSnapshot } from '../../src/roles/scheduler/cluster-snapshot.js';
import { StoreUnavailableError, type WatchEvent } from '../../src/store/store.js';
import { machineKey, unitStatusKey } from '../../src/store/keys.js';
import type { Assignment, UnitStatus } from '../../src/schemas/cluster.js';
import type { NotificationEvent } from '../../src/schemas/notification.js';

// Which unit failures and lost machines a scheduler tells, from the watch events it is given
// (the watched cluster's listeners, driven here by hand).

const status = (active: UnitStatus['active'], sub: UnitStatus['sub'], restarts = 0): UnitStatus => ({
  unit: 'web-1.service', service: 'web', instance: 1, machine: 'm1', release: 1, spec: 'abc', image: 'reg/web@sha256:1', active, sub, restarts, updatedAt: '2026-01-01T00:00:00Z',
});
const key = unitStatusKey('m1', 'web-1.service@abc');

function observe(initial: UnitStatus[] = [], snapshot: () => Pick<ClusterSnapshot, 'assignments'> = () => ({ assignments: [] })) {
  const listeners: Record<string, (event: WatchEvent) => void> = {};
  const told: NotificationEvent[] = [];
  new FailureObserver(
    { statuses: () => initial, onChange: (part, listener) => void (listeners[part] = listener), snapshot: snapshot as () => ClusterSnapshot },
    (event) => told.push(event),
  );
  let revision = 10;
  const put = (value: UnitStatus) => listeners.statuses!({ type: 'put', key, value: JSON.stringify(value), modRevision: ++revision });
  const lose = (machine: string) => listeners.machines!({ type: 'delete', key: machineKey(machine), modRevision: ++revision });
  return { told, put, lose, listeners };
}

t.test('a unit is told failed once until it runs again', async (t) => {
  const { told, put } = observe();
  put(status('activating', 'start-pre'));
  put(status('failed', 'auto-restart', 1));
  put(status('activating', 'start-pre', 1));
  put(status('failed', 'auto-restart', 2));
  t.equal(told.length, 1, 'crash-looping before it ever ran: one event');
  t.match(told[0], { event: 'unit.failed', service: 'web', details: { unit: 'web-1.service', machine: 'm1', restarts: 1 } });
  put(status('active', 'running', 2));
  put(status('failed', 'auto-restart', 3));
  t.equal(told.length, 2, 'it ran, then failed again: another event');
  t.not(told[0]!.id, told[1]!.id);
});

t.test('what was failed when the scheduler started is told under the id of its failure episode', async (t) => {
  const episode = { ...status('failed', 'failed'), failingSince: '2026-01-01T00:00:00Z' };
  const { told, put } = observe([episode]);
  t.equal(told.length, 1, 'it may have failed while no scheduler watched');
  put({ ...episode, restarts: 1 });
  t.equal(told.length, 1, 'told once, not again at its next failed write');
  const before = observe();
  before.put(episode);
  t.equal(before.told[0]!.id, told[0]!.id, 'the id a scheduler watching at the time made: the outbox keeps one');
  const later = observe();
  later.put({ ...episode, failingSince: '2026-01-01T00:05:00Z' });
  t.not(later.told[0]!.id, told[0]!.id, 'another episode is another event');
});

t.test('a failed status without an episode (an older agent) at the start is not told: it may have been', async (t) => {
  const { told, put } = observe([status('failed', 'failed')]);
  put(status('failed', 'failed', 1));
  t.equal(told.length, 0);
});

t.test('a lost machine names the services assigned to it', async (t) => {
  const assignments = [{ machine: 'm1', service: 'web' }, { machine: 'm2', service: 'api' }, { machine: 'm1', service: 'db' }] as Assignment[];
  const { told, lose } = observe([], () => ({ assignments }));
  lose('m1');
  t.match(told, [{ event: 'machine.lost', service: null, details: { machine: 'm1', services: ['db', 'web'] } }]);
});

t.test('a listener never throws into the watch: an unreachable store or an unreadable status', async (t) => {
  const { told, lose, listeners } = observe([], () => {
    throw new StoreUnavailableError('etcd', new Error('deadline exceeded'));
  });
  t.doesNotThrow(() => lose('m1'), 'a machine lost while the store is unreachable');
  t.match(told, [{ event: 'machine.lost', details: { machine: 'm1', services: [] } }], 'is told without its services');
  t.doesNotThrow(() => listeners.statuses!({ type: 'put', key, value: '{not json', modRevision: 99 }));
});
