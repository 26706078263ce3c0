import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import { assignmentKey, machineDrainKey, machineKey, unitStatusKey } from '../../src/store/keys.js';
import type { Machine } from '../../src/schemas/cluster.js';
import { slotOf, unitName } from '../../src/units.js';
import { ClusterWatch, serviceOfSlotKey } from '../../src/roles/scheduler/cluster-snapshot.js';
import { sampleAssignment } from '../harness/assignment.js';
import { waitFor } from '../harness/wait.js';

// A rollout waits for changes of its own service's units (ClusterWatch.changedSince with a
// service): with 200 services rolling, a wait that woke at every unit change in the cluster
// planned 200 rollout steps per change (issue 29's scale bench). On the embedded store.

const dir = mkdtempSync(join(tmpdir(), 'cluster-watch-'));
const store = await EmbeddedStore.open(join(dir, 'store'));
const watch = await ClusterWatch.start(store);
t.teardown(async () => {
  await watch.close();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const assign = (service: string, instance: number) => {
  const assignment = sampleAssignment({ service, instance, unit: unitName(service, instance), machine: 'm1' });
  return store.put(assignmentKey('m1', slotOf(assignment)), JSON.stringify(assignment));
};

/** How long a wait for `service` took, with a 1.5 s timeout, while `change` happens 100 ms into it. */
async function waited(service: string, change: () => Promise<unknown>): Promise<number> {
  const seen = watch.now();
  const started = Date.now();
  const waiting = watch.changedSince(seen, 1500, service);
  setTimeout(() => void change(), 100);
  await waiting;
  return Date.now() - started;
}

t.test('the service of a slot key', async (t) => {
  t.equal(serviceOfSlotKey(assignmentKey('m1', 'web-api-12.service@3f2a9c01de')), 'web-api');
  t.equal(serviceOfSlotKey(unitStatusKey('m1', 'db-1.service@abc')), 'db');
  t.equal(serviceOfSlotKey('/platform/assignments/m1/notaunit'), undefined);
});

t.test("another service's unit does not wake a service's wait; its own unit does; a drain wakes every service", async (t) => {
  await assign('warm', 1); // the watch has delivered something before
  t.ok((await waited('alpha', () => assign('beta', 1))) >= 1400, "beta's new unit: alpha's wait runs to its timeout");
  t.ok((await waited('alpha', () => assign('alpha', 1))) < 1000, "alpha's new unit wakes alpha's wait");
  t.ok((await waited('alpha', () => store.put(machineDrainKey('m2'), JSON.stringify({ machine: 'm2', since: new Date().toISOString() })))) < 1000, 'a drain wakes it');
  const seen = watch.now();
  const any = watch.changedSince(seen, 1500);
  const started = Date.now();
  setTimeout(() => void assign('beta', 2), 100);
  await any;
  t.ok(Date.now() - started < 1000, 'a wait without a service wakes at any change');
  t.ok((await Promise.race([watch.changedSince(seen, 1500, 'beta').then(() => 'at once'), new Promise((r) => setTimeout(() => r('waited'), 50))])) === 'at once', 'a change already seen after `since` resolves at once');
});

t.test("a machine record rewritten for its count of units wakes no wait; one whose capacity changed wakes every service's", async (t) => {
  const now = new Date().toISOString();
  const machine: Machine = { id: 'm1', address: '127.0.0.1:1', host: '127.0.0.1', labels: {}, network: 'host', docker: { reachable: true }, capacity: { units: 10 }, unitCount: 0, startedAt: now, updatedAt: now };
  const write = (record: Machine) => store.put(machineKey(record.id), JSON.stringify(record));
  await write(machine);
  await waitFor(() => watch.snapshot().machines.length === 1, 5000, { what: 'the watch to deliver the machine' });
  t.ok((await waited('alpha', () => write({ ...machine, unitCount: 3, updatedAt: new Date().toISOString() }))) >= 1400, 'unitCount 0 → 3: the wait runs to its timeout');
  t.ok((await waited('alpha', () => write({ ...machine, unitCount: 3, capacity: { units: 20 } }))) < 1000, 'capacity 10 → 20 wakes it');
  t.ok((await waited('alpha', () => store.delete(machineKey('m1')))) < 1000, 'the machine gone wakes it');
});
