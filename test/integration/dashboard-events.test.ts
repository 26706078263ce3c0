import t from 'tap';
import { request } from 'undici';
import { pino } from 'pino';
import type { FastifyBaseLogger } from 'fastify';
import { EtcdStore } from '../../src/store/etcd-store.js';
import { assignmentKey, deploymentKey, journalKey, machineDrainKey, machineKey, serviceKey, unitStatusKey } from '../../src/store/keys.js';
import { createRoleServer } from '../../src/http/server.js';
import { EventHub, eventsRoute } from '../../src/roles/orchestrator/events.js';
import { startEtcd } from '../harness/etcd.js';
import { freePort } from '../harness/free-port.js';
import { waitFor } from '../harness/wait.js';
import { openEventStream as openStream } from '../harness/event-stream.js';

// GET /events on real etcd: a snapshot first, then one event per change, unit events joining the
// scheduler's assignment with the agent's status, heartbeats, shared watches that close when the
// last client leaves, and streams that end (and reconnect to a fresh snapshot) across an etcd outage.

const etcd = await startEtcd();
const store = new EtcdStore([etcd.url]);
const log = pino({ level: 'silent' }) as unknown as FastifyBaseLogger;
const hub = new EventHub(store, log, { heartbeatMs: 300, lingerMs: 100 });
const access = { mode: 'none' as const, listenerLoopback: true };
const server = await createRoleServer({ role: 'orchestrator', logger: log, access, readiness: async () => ({}) });
eventsRoute(server, hub);
const port = await freePort();
await server.listen({ host: '127.0.0.1', port });
const url = `http://127.0.0.1:${port}`;
t.teardown(async () => {
  await server.close();
  await hub.close();
  await store.close();
  await etcd.stop();
});

const now = new Date().toISOString();
const service = (name: string) => ({ name, uuid: '00000000-0000-4000-8000-000000000000', description: '', containerImage: `r.test/${name}`, autoDeploy: 'always', conflictsWith: '', loadBalanced: true, publicFacing: false, config: { numInstances: 1, ports: [], env: {} }, createdAt: now, updatedAt: now });
const assignment = (machine: string, unit: string) => ({ unit, service: 'alpha', instance: 1, machine, release: 2, spec: 's1', image: 'r.test/alpha@sha256:00', ports: [], env: {}, stopGraceSeconds: 1, deployment: 'd1', assignedAt: now });
const status = (machine: string, unit: string, active: string, sub: string) => ({ ...assignment(machine, unit), active, sub, address: '127.0.0.1:4000', restarts: 1, updatedAt: now });

t.test('a stream opens with a snapshot of services, units, machines, deployments and the journal', async (t) => {
  await store.put(serviceKey('alpha'), JSON.stringify(service('alpha')));
  await store.put(machineKey('m1'), JSON.stringify({ id: 'm1', address: '127.0.0.1:1' }));
  await store.put(assignmentKey('m1', 'alpha-1.service@s1'), JSON.stringify(assignment('m1', 'alpha-1.service')));
  await store.put(deploymentKey('d1'), JSON.stringify({ id: 'd1', service: 'alpha', state: 'rolling', units: [] }));
  const last = await store.put(journalKey('j1'), JSON.stringify({ id: 'j1', kind: 'deployment.created', message: 'v2' }));
  const stream = await openStream(url);
  t.teardown(() => stream.close());
  const snapshot = await stream.next('snapshot');
  t.equal(stream.events[0]?.event, 'snapshot', 'the snapshot comes first');
  t.ok(Number(snapshot.id) >= last, 'its id is the store revision it reflects');
  t.match(snapshot.data, {
    services: { alpha: { name: 'alpha' } },
    machines: { m1: { id: 'm1' } },
    units: { 'm1/alpha-1.service@s1': { unit: 'alpha-1.service', machine: 'm1', active: 'inactive', sub: 'dead', desired: true } },
    deployments: { d1: { state: 'rolling' } },
    journal: { j1: { message: 'v2' } },
  });
});

t.test('each change is one event: {key, value} for a write, {key, deleted: true} for a delete', async (t) => {
  const stream = await openStream(url);
  t.teardown(() => stream.close());
  await stream.next('snapshot');
  const revision = await store.put(serviceKey('beta'), JSON.stringify(service('beta')));
  const put = await stream.next('service', (data) => data.key === 'beta');
  t.match(put, { id: String(revision), data: { key: 'beta', value: { name: 'beta' } } });
  await store.delete(serviceKey('beta'));
  t.same((await stream.next('service')).data, { key: 'beta', deleted: true });
  await store.put(deploymentKey('d1'), JSON.stringify({ id: 'd1', service: 'alpha', state: 'succeeded', units: [] }));
  t.match((await stream.next('deployment')).data, { key: 'd1', value: { state: 'succeeded' } });
  await store.put(journalKey('j2'), JSON.stringify({ id: 'j2', kind: 'deployment.succeeded', message: 'done' }));
  t.match((await stream.next('journal')).data, { key: 'j2', value: { message: 'done' } });
  await store.delete(machineKey('m1'));
  t.same((await stream.next('machine')).data, { key: 'm1', deleted: true });
});

t.test("a unit event joins the scheduler's assignment with the agent's status", async (t) => {
  const stream = await openStream(url);
  t.teardown(() => stream.close());
  await stream.next('snapshot');
  const key = 'm2/alpha-1.service@s1';
  await store.put(assignmentKey('m2', 'alpha-1.service@s1'), JSON.stringify(assignment('m2', 'alpha-1.service')));
  t.match((await stream.next('unit')).data, { key, value: { unit: 'alpha-1.service', service: 'alpha', active: 'inactive', sub: 'dead', desired: true } });
  await store.put(unitStatusKey('m2', 'alpha-1.service@s1'), JSON.stringify(status('m2', 'alpha-1.service', 'active', 'running')));
  t.match((await stream.next('unit')).data, { key, value: { active: 'active', sub: 'running', address: '127.0.0.1:4000', restarts: 1, release: 2, desired: true } });
  await store.delete(assignmentKey('m2', 'alpha-1.service@s1'));
  t.match((await stream.next('unit')).data, { key, value: { active: 'active', desired: false } }, 'unassigned but still running: being stopped');
  await store.delete(unitStatusKey('m2', 'alpha-1.service@s1'));
  t.same((await stream.next('unit')).data, { key, deleted: true });
});

t.test("a machine event joins the agent's machine record with an operator's drain", async (t) => {
  const stream = await openStream(url);
  t.teardown(() => stream.close());
  await stream.next('snapshot');
  await store.put(machineKey('m3'), JSON.stringify({ id: 'm3', address: '127.0.0.1:3' }));
  t.same((await stream.next('machine')).data, { key: 'm3', value: { id: 'm3', address: '127.0.0.1:3' } });
  const drain = { machine: 'm3', since: '2026-01-01T00:00:00.000Z', reason: 'disk' };
  await store.put(machineDrainKey('m3'), JSON.stringify(drain));
  t.same((await stream.next('machine')).data, { key: 'm3', value: { id: 'm3', address: '127.0.0.1:3', drain } }, 'a drain is a change of the machine');

  const later = await openStream(url);
  t.teardown(() => later.close());
  t.same((await later.next('snapshot')).data.machines.m3, { id: 'm3', address: '127.0.0.1:3', drain }, 'a snapshot carries the drain');

  await store.delete(machineDrainKey('m3'));
  t.same((await stream.next('machine')).data, { key: 'm3', value: { id: 'm3', address: '127.0.0.1:3' } }, 'undrained: the machine without it');
  await store.put(machineDrainKey('m3'), JSON.stringify(drain));
  await stream.next('machine');
  await store.delete(machineKey('m3'));
  t.same((await stream.next('machine')).data, { key: 'm3', deleted: true });
  await store.delete(machineDrainKey('m3'));
  t.same((await stream.next('machine')).data, { key: 'm3', deleted: true }, 'the drain of a machine that is gone shows nothing');
});

t.test('idle streams get heartbeat comments', async (t) => {
  const stream = await openStream(url);
  t.teardown(() => stream.close());
  await stream.next('snapshot');
  await waitFor(() => stream.comments.some((line) => line.startsWith(': heartbeat')), 5000, { what: 'a heartbeat' });
  t.pass('a heartbeat comment arrived');
});

t.test('clients share one watch per prefix, which closes after the last client leaves', async (t) => {
  await waitFor(() => !hub.watching, 5000, { what: 'the watches of earlier tests to close' });
  const first = await openStream(url);
  const second = await openStream(url);
  await Promise.all([first.next('snapshot'), second.next('snapshot')]);
  t.equal(hub.clientCount, 2);
  t.ok(hub.watching);
  const metrics = await (await request(`${url}/metrics`)).body.text();
  t.match(metrics, /platform_events_clients 2/);
  t.match(metrics, /platform_events_watches 7/, 'seven prefixes, watched once for both clients');
  await store.put(serviceKey('gamma'), JSON.stringify(service('gamma')));
  await Promise.all([first.next('service'), second.next('service')]);
  first.close();
  await waitFor(() => hub.clientCount === 1, 5000, { what: 'the server to notice the first client left' });
  t.ok(hub.watching, 'one client left: the watches stay');
  second.close();
  await waitFor(() => !hub.watching, 5000, { what: 'the watches to close' });
  t.equal(hub.clientCount, 0);
  t.match(await (await request(`${url}/metrics`)).body.text(), /platform_events_watches 0/);
});

t.test('when etcd goes away the streams end and /events answers 503; once it is back a new stream gets a fresh snapshot', async (t) => {
  const stream = await openStream(url);
  await stream.next('snapshot');
  await etcd.kill();
  await Promise.race([stream.ended, new Promise((_, reject) => setTimeout(() => reject(new Error('the stream did not end within 10 s')), 10_000))]);
  t.pass('the stream ended');
  const refused = await request(`${url}/events`);
  t.equal(refused.statusCode, 503);
  t.match(await refused.body.json(), { message: /key-value store .* is unreachable/ });
  await etcd.restart();
  await waitFor(() => store.put(serviceKey('delta'), JSON.stringify(service('delta'))), 10_000, { what: 'etcd to take writes again' });
  const again = await waitFor(async () => openStream(url), 15_000, { intervalMs: 250, what: '/events to answer again' });
  t.teardown(() => again.close());
  t.match((await again.next('snapshot')).data, { services: { delta: { name: 'delta' } } }, 'the snapshot has what was written during the outage');
});

t.test('a service record the orchestrator cannot read (no config) is sent as it is and the hub goes on', async (t) => {
  // bench/scale.ts wrote such a record ({name, loadBalanced, publicFacing}): redacting its env threw
  // inside the watch's callback, which etcd3 rethrows, and the orchestrator process exited.
  const stream = await openStream(url);
  t.teardown(() => stream.close());
  await stream.next('snapshot');
  await store.put(serviceKey('bare'), JSON.stringify({ name: 'bare', loadBalanced: true, publicFacing: false }));
  const bare = await stream.next('service');
  t.match(bare.data, { key: 'bare', value: { name: 'bare' } });
  await store.put(serviceKey('after'), JSON.stringify(service('after')));
  t.match((await stream.next('service')).data, { key: 'after', value: { name: 'after' } }, 'the next change still comes');
  const again = await openStream(url);
  t.teardown(() => again.close());
  t.match((await again.next('snapshot')).data, { services: { bare: { name: 'bare' }, after: { name: 'after' } } }, 'a new snapshot holds it too');
  await store.delete(serviceKey('bare'));
  await store.delete(serviceKey('after'));
});
