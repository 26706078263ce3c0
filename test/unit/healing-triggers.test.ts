import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import type { FastifyBaseLogger } from 'fastify';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import type { Store } from '../../src/store/store.js';
import { assignmentKey, assignmentRoot, deploymentKey, deploymentPrefix, machineDrainKey, machineKey, releaseKey, serviceKey, unitStatusKey } from '../../src/store/keys.js';
import type { Assignment, Machine, MachineDrain, UnitStatus } from '../../src/schemas/cluster.js';
import type { Deployment, Release } from '../../src/schemas/release.js';
import type { Service, ServiceConfig } from '../../src/schemas/service.js';
import { slotOf } from '../../src/units.js';
import { Scheduler } from '../../src/roles/scheduler/scheduler.js';
import { migrateStoreSchema } from '../../src/roles/scheduler/housekeeping/schema-migration.js';
import { sampleAssignment } from '../harness/assignment.js';
import { waitFor } from '../harness/wait.js';

// Issue 29 item 2: a drain set (or a machine lost) while a heal pass runs must cause one more
// pass at once. The leader used to drop such a trigger (`if (this.healing) return`), so the
// drained machine's units waited for the next 10 s check. A real scheduler on the embedded store,
// with a simulated agent; a gate on the store holds one heal pass part-way, after it took its
// snapshot, while the drain arrives.

const log = pino({ level: 'silent' }) as unknown as FastifyBaseLogger;
const dir = mkdtempSync(join(tmpdir(), 'healing-triggers-'));
const embedded = await EmbeddedStore.open(join(dir, 'store'));

/** Holds the next listing of deployments (a heal pass reads them after its snapshot) until `release` is called. */
const gate = { armed: false, held: undefined as undefined | (() => void) };
const store: Store = new Proxy(embedded, {
  get(target, property, receiver) {
    const value = Reflect.get(target, property, receiver);
    if (typeof value !== 'function') return value;
    return async (...args: unknown[]) => {
      if (property === 'list' && args[0] === deploymentPrefix && gate.armed) {
        gate.armed = false;
        await new Promise<void>((resolve) => (gate.held = resolve));
      }
      return (value as (...a: unknown[]) => unknown).apply(target, args);
    };
  },
});

const now = new Date().toISOString();
const machine = (id: string): Machine => ({ id, address: '127.0.0.1:1', host: '127.0.0.1', labels: {}, network: 'bridge', docker: { reachable: true }, capacity: { units: 10 }, unitCount: 0, startedAt: now, updatedAt: now });
const config: ServiceConfig = { numInstances: 1, ports: [{ container: 80 }], env: {} };
const service: Service = { name: 'web', uuid: randomUUID(), description: '', containerImage: 'registry.test/web', autoDeploy: 'never', conflictsWith: '', loadBalanced: false, publicFacing: false, config, createdAt: now, updatedAt: now };
const image = `registry.test/web@sha256:${'0'.repeat(64)}`;
const deployed: Deployment = { id: randomUUID(), service: 'web', release: 1, image, state: 'succeeded', trigger: 'manual', units: [], createdAt: now, updatedAt: now, finishedAt: now };
const release: Release = { service: 'web', version: 1, image, digest: `sha256:${'0'.repeat(64)}`, config, pushedAt: 0, deployment: deployed.id, createdAt: now, serviceUuid: service.uuid };
const running = sampleAssignment({ service: 'web', unit: 'web-1.service', machine: 'm1', release: 1, image, ports: [{ container: 80 }], env: {}, deployment: deployed.id });

// The store in today's schema, so the leader has nothing to migrate (and back up first).
await migrateStoreSchema({ store: embedded, leaderStore: embedded, backupDir: join(dir, 'backups'), log });
for (const id of ['m1', 'm2', 'm3']) await embedded.put(machineKey(id), JSON.stringify(machine(id)));
await embedded.put(serviceKey('web'), JSON.stringify(service));
await embedded.put(releaseKey('web', 1), JSON.stringify(release));
await embedded.put(deploymentKey(deployed.id), JSON.stringify(deployed));

// The simulated agents: an assigned unit runs at once; an unassigned one is gone.
const status = (a: Assignment): UnitStatus => ({ unit: a.unit, service: a.service, instance: a.instance, machine: a.machine, release: a.release, spec: a.spec, image: a.image, active: 'active', sub: 'running', restarts: 0, updatedAt: new Date().toISOString() });
const agents = await embedded.watchPrefix(assignmentRoot, (event) => {
  if (event.type === 'put') {
    const a = JSON.parse(event.value!) as Assignment;
    void embedded.put(unitStatusKey(a.machine, slotOf(a)), JSON.stringify(status(a))).catch(() => undefined);
  } else {
    const [, , , machineId, slot] = event.key.split('/').slice(1);
    if (machineId && slot) void embedded.delete(unitStatusKey(machineId, slot)).catch(() => undefined);
  }
});
await embedded.put(assignmentKey('m1', slotOf(running)), JSON.stringify(running));

const scheduler = new Scheduler({ store, log, id: 'test-scheduler', address: '127.0.0.1:1', announce: false, leaseTtlSeconds: 10, backupDir: join(dir, 'backups') });
t.teardown(async () => {
  gate.held?.();
  await scheduler.close();
  await agents.close();
  await embedded.close();
  rmSync(dir, { recursive: true, force: true });
});

const drain = (id: string) => embedded.put(machineDrainKey(id), JSON.stringify({ machine: id, since: new Date().toISOString() } satisfies MachineDrain));
const reschedules = async () => (await embedded.list(deploymentPrefix)).map((kv) => JSON.parse(kv.value) as Deployment).filter((d) => d.trigger === 'reschedule');

t.test('a drain set while a heal pass runs is healed by one more pass at once, not at the next 10 s check', async (t) => {
  // Its 10 s check is set in start(): the first comes 10 s after this at the earliest (the heal at
  // the end of the renewal grace, 3 lease TTLs after the election, later still).
  const started = Date.now();
  await scheduler.start();
  // The pass on election, done: everything is in place.
  await waitFor(() => scheduler.isLeader() && scheduler.healingState().healedAt, 5000, { what: 'the first heal pass' });
  t.same(await reschedules(), [], 'nothing to heal at first');

  // A drain of a machine without units starts a pass; the gate holds it after its snapshot.
  gate.armed = true;
  await drain('m3');
  await waitFor(() => gate.held, 2000, { what: 'a heal pass held at its listing of deployments' });
  // Meanwhile (a few milliseconds after the held pass began, so their times differ) the machine holding web-1 is drained.
  await sleep(5);
  const drainedAt = Date.now();
  await drain('m1');
  // Time for the drain's watch event to reach the scheduler while its pass is still held.
  await sleep(100);
  gate.held!();

  // The pass asked for during the held one must come before the first 10 s check could.
  const deadline = started + 9500 - Date.now();
  t.ok(deadline > 2000, `the check is done before the next periodic heal (${deadline} ms to go)`);
  const moved = await waitFor(async () => (await reschedules())[0], deadline, { what: 'a reschedule of web off the drained m1' }).catch((error: Error) => error);
  t.notOk(moved instanceof Error, `a reschedule was made ${moved instanceof Error ? `(${moved.message})` : `${Date.now() - drainedAt} ms after the drain`}`);
  if (!(moved instanceof Error)) t.match(moved, { service: 'web', trigger: 'reschedule', release: 1 }, 'of web, its current release');
  // The pass records when it took its snapshot once its reschedules are made.
  const healedAfter = await waitFor(() => Date.parse(scheduler.healingState().healedAt ?? '') >= drainedAt, 2000, { what: 'the pass to end' }).catch(() => false);
  t.ok(healedAfter, 'a heal pass took its snapshot after the drain');
});
