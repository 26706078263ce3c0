import t from 'tap';
import { Readable } from 'node:stream';
import { bar, progressLine, progressOf } from '../../src/client/deploy-watch.js';
import { applyEvent, serverSentEvents } from '../../src/client/live-cluster.js';
import { statusScreen, unitCounts } from '../../src/client/status-screen.js';
import { ClusterState } from '../../src/client/cluster-state.js';
import type { Deployment } from '../../src/schemas/release.js';
import type { ClusterUnit, Machine } from '../../src/schemas/cluster.js';

const deployment = (change: Partial<Deployment> = {}): Deployment => ({
  id: 'd1',
  service: 'web',
  release: 3,
  image: 'registry/web@sha256:00',
  state: 'rolling',
  trigger: 'manual',
  units: [
    { unit: 'web-1.service', machine: 'm1', active: 'active', sub: 'running' },
    { unit: 'web-2.service', machine: 'm1', active: 'activating', sub: 'auto-restart', error: 'exited with code 1' },
  ],
  createdAt: '2026-01-01T00:00:00Z',
  updatedAt: '2026-01-01T00:00:00Z',
  ...change,
});

t.test('progress counts running units of wanted and says what a waiting unit is doing', async (t) => {
  t.same(progressOf(deployment(), 3), { state: 'rolling', release: 3, ready: 1, wanted: 3, reason: 'web-2.service on m1: exited with code 1' });
  t.same(progressOf(deployment({ state: 'pending', units: [] }), 2).reason, 'waiting for the scheduler');
  const migrating = { job: 'd1-release', machine: 'm1', state: 'running' as const, lines: ['step 1', 'step 2'], lineCount: 2 };
  t.same(progressOf(deployment({ state: 'pending', units: [], releaseCommand: migrating }), 2).reason, 'release command running on m1: step 2', "a release command's newest line while it runs");
  t.same(progressOf(deployment({ state: 'failed', reason: 'web-2.service crashed' }), 2).reason, 'web-2.service crashed');
  t.same(progressOf(deployment({ state: 'succeeded', units: [] }), 2), { state: 'succeeded', release: 3, ready: 2, wanted: 2 }, 'success means every unit is ready');
});

t.test('a terminal line has a bar; a plain line has none', async (t) => {
  t.equal(bar(0, 4), `[${'-'.repeat(20)}]`);
  t.equal(bar(1, 4), `[${'#'.repeat(5)}${'-'.repeat(15)}]`);
  t.equal(bar(5, 4), `[${'#'.repeat(20)}]`, 'a surge does not overflow the bar');
  const progress = progressOf(deployment(), 2);
  t.equal(progressLine('web', progress, false), 'web v3  rolling  1/2 ready  web-2.service on m1: exited with code 1');
  t.equal(progressLine('web', progress, true), `web v3  rolling     [${'#'.repeat(10)}${'-'.repeat(10)}] 1/2 ready  web-2.service on m1: exited with code 1`);
});

t.test('server-sent events are parsed across chunk boundaries and applied to the copy', async (t) => {
  const snapshot = { revision: 1, services: {}, units: {}, machines: {}, deployments: { d1: deployment() }, journal: {} };
  const text = `retry: 2000\n\nevent: snapshot\nid: 1\ndata: ${JSON.stringify(snapshot)}\n\n: heartbeat\n\nevent: deployment\nid: 2\ndata: ${JSON.stringify({ key: 'd1', value: deployment({ state: 'succeeded' }) })}\n\n`;
  const chunks = text.match(/[\s\S]{1,7}/g)!.map((chunk) => Buffer.from(chunk));
  const state = new ClusterState();
  const kinds: string[] = [];
  for await (const event of serverSentEvents(Readable.from(chunks))) {
    kinds.push(event.event ?? '');
    t.ok(applyEvent(state, event));
  }
  t.same(kinds, ['snapshot', 'deployment']);
  t.equal(state.deployments.get('d1')?.state, 'succeeded');
});

const unit = (instance: number, change: Partial<ClusterUnit> = {}): ClusterUnit => ({
  unit: `web-${instance}.service`,
  service: 'web',
  instance,
  machine: 'm1',
  release: 3,
  spec: 's',
  image: 'i',
  active: 'active',
  sub: 'running',
  restarts: 0,
  desired: true,
  ...change,
});

t.test('units running of wanted count instances, not the containers of a rolling update', async (t) => {
  t.same(unitCounts([unit(1), unit(1, { release: 2, desired: false }), unit(2, { active: 'activating', sub: 'start-pre' }), unit(2, { release: 2 })]), { running: 2, placed: 2 });
  t.same(unitCounts([unit(1, { desired: false })]), { running: 0, placed: 0 }, 'a unit being stopped is not placed');
});

t.test('the status screen counts running units of the wanted ones, and says how many are placed when that differs', async (t) => {
  const state = new ClusterState();
  const units = Object.fromEntries(Array.from({ length: 97 }, (_, i) => [`m1/web-${i + 1}`, unit(i + 1)]));
  state.load({
    revision: 1,
    services: { web: { name: 'web', config: { numInstances: 1000, ports: [], env: {} } } as never },
    units: { ...units, 'm1/web-98': unit(98, { active: 'activating', sub: 'start-pre' }) },
    machines: {},
    deployments: { d1: deployment({ state: 'failed', wanted: 1000, reason: 'no machine has room' }) },
    journal: {},
  });
  t.match(statusScreen(state), /\nweb +97\/1000 \(placed 98\) +v3 +failed/, '97 of 1,000 wanted run, 98 are placed');

  state.load({
    revision: 2,
    services: { web: { name: 'web', config: { numInstances: 5, ports: [], env: {} } } as never },
    units: { 'm1/web-1': unit(1), 'm1/web-2': unit(2) },
    machines: {},
    deployments: { d1: deployment({ state: 'succeeded', trigger: 'rollback', wanted: 2 }) },
    journal: {},
  });
  t.match(statusScreen(state), /\nweb +2\/2 +v3 +succeeded/, "wanted is what the deployed release runs, not the next config's number");

  state.load({ revision: 3, services: { web: { name: 'web', config: { numInstances: 5, ports: [], env: {} } } as never }, units: {}, machines: {}, deployments: {}, journal: {} });
  t.match(statusScreen(state), /\nweb +0\/0 +- +never deployed/, 'a service never deployed wants nothing yet');
});

t.test('the status screen shows services, machines (lost ones too) and deployments', async (t) => {
  const machine: Machine = {
    id: 'm1', address: '10.0.0.1:9003', host: '10.0.0.1', labels: {}, network: 'bridge', docker: { reachable: true, version: '27.0' },
    capacity: { units: 10 }, unitCount: 2, startedAt: '', updatedAt: '', drain: { machine: 'm1', since: '2026-01-01T00:00:00Z', reason: 'kernel' },
  };
  const state = new ClusterState();
  state.load({
    revision: 1,
    services: { web: { name: 'web', config: { numInstances: 2, ports: [], env: {} } } as never },
    units: { 'm1/web-1': unit(1), 'm1/web-2': unit(2, { active: 'failed', sub: 'failed' }), 'm2/web-3': unit(3, { machine: 'm2' }) },
    machines: { m1: machine },
    deployments: { d1: deployment({ state: 'failed', reason: 'web-2.service crashed' }) },
    journal: {},
  });
  const screen = statusScreen(state);
  t.match(screen, /^SERVICE +RUNNING +RELEASE +LAST DEPLOYMENT +REASON\nweb +2\/3 +v3 +failed \(manual, v3\) +web-2\.service crashed\n/);
  t.match(screen, /\nm1 +10\.0\.0\.1:9003 +1\/2 +draining since 2026-01-01T00:00:00Z \(kernel\) +27\.0\n/);
  t.match(screen, /\nm2 +- +1\/1 +lost +-\n/, 'a machine with units and no registration is lost');
  t.match(screen, /\nd1 +web +v3 +failed +manual/);
  t.match(statusScreen(new ClusterState()), /no services[^\n]*\n\nno machines[^\n]*\n\nno deployments yet\n$/);
});
