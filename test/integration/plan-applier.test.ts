import t from 'tap';
import { randomUUID } from 'node:crypto';
import { pino } from 'pino';
import type { FastifyBaseLogger } from 'fastify';
import { EtcdStore } from '../../src/store/etcd-store.js';
import type { Store } from '../../src/store/store.js';
import { ROOT, assignmentRoot, deploymentKey, machineKey, serviceKey, unitStatusKey, unitStatusPrefix } from '../../src/store/keys.js';
import type { Assignment, Machine, UnitStatus } from '../../src/schemas/cluster.js';
import type { Deployment, Release } from '../../src/schemas/release.js';
import type { Service, ServiceConfig } from '../../src/schemas/service.js';
import { compileServiceGlob } from '../../src/service-glob.js';
import { slotOf } from '../../src/units.js';
import { ClusterWatch } from '../../src/roles/scheduler/cluster-snapshot.js';
import { rollOut, type RolloutOutcome } from '../../src/roles/scheduler/deploys/rollout.js';
import { PlanApplier } from '../../src/roles/scheduler/deploys/plan-applier.js';
import { startEtcd } from '../harness/etcd.js';
import { waitFor } from '../harness/wait.js';

// Concurrent rollouts of different services, on a real etcd: every rollout's placement goes
// through the plan applier, so however they interleave (deploys at once, a lost machine's units
// healed while other services deploy), no commit ever breaks a machine's capacity in units or
// memory, a host port, or a conflictsWith rule. A watch on the assignments checks the invariants
// after every write. The agents are simulated (a unit reports running as soon as it is assigned):
// what is under test is the scheduler's commit path, not Docker.

const log = pino({ level: 'silent' }) as unknown as FastifyBaseLogger;
const etcd = await startEtcd();
t.teardown(() => etcd.stop());

interface MachineSpec {
  id: string;
  units: number;
  memoryMB?: number;
}

interface ServiceSpec {
  name: string;
  instances: number;
  hostPort?: number;
  memoryMB?: number;
  conflictsWith?: string;
}

/** One scheduler's view of a cluster in a fresh key space: machines, declarations, simulated agents, and an invariant check on every assignment write. */
async function cluster(t: { teardown(fn: () => Promise<void>): void }, machines: MachineSpec[]) {
  const store: Store = new EtcdStore([etcd.url]);
  await store.deletePrefix(ROOT);
  const machineRecords = new Map<string, Machine>();
  for (const spec of machines) await addMachine(spec);
  const watch = await ClusterWatch.start(store);
  const applier = new PlanApplier(store, watch, log);
  const declared = new Map<string, Service>();
  const assignments = new Map<string, Assignment>();
  const violations: string[] = [];
  let writes = 0;

  async function addMachine(spec: MachineSpec): Promise<void> {
    const now = new Date().toISOString();
    const record: Machine = {
      id: spec.id,
      address: '127.0.0.1:1',
      host: '127.0.0.1',
      labels: {},
      network: 'bridge',
      docker: { reachable: true },
      capacity: { units: spec.units, ...(spec.memoryMB ? { memoryMB: spec.memoryMB } : {}) },
      unitCount: 0,
      startedAt: now,
      updatedAt: now,
    };
    machineRecords.set(spec.id, record);
    await store.put(machineKey(spec.id), JSON.stringify(record));
  }

  // The simulated agents: an assigned unit on a live machine runs; an unassigned one is gone.
  const agents = await store.watchPrefix(assignmentRoot, (event) => {
    writes++;
    if (event.type === 'put') {
      const assignment = JSON.parse(event.value!) as Assignment;
      assignments.set(event.key, assignment);
      if (machineRecords.has(assignment.machine)) void report(assignment);
    } else {
      const gone = assignments.get(event.key);
      assignments.delete(event.key);
      if (gone) void store.delete(unitStatusKey(gone.machine, slotOf(gone))).catch(() => undefined);
    }
    violations.push(...brokenInvariants(event.modRevision));
  });

  async function report(assignment: Assignment): Promise<void> {
    const status: UnitStatus = {
      unit: assignment.unit,
      service: assignment.service,
      instance: assignment.instance,
      machine: assignment.machine,
      release: assignment.release,
      spec: assignment.spec,
      image: assignment.image,
      active: 'active',
      sub: 'running',
      restarts: 0,
      updatedAt: new Date().toISOString(),
    };
    await store.put(unitStatusKey(assignment.machine, slotOf(assignment)), JSON.stringify(status)).catch(() => undefined);
  }

  /** What is wrong on any live machine now: too many units, too much memory, a host port twice, two conflicting services. */
  function brokenInvariants(revision: number): string[] {
    const found: string[] = [];
    const byMachine = new Map<string, Assignment[]>();
    for (const a of assignments.values()) byMachine.set(a.machine, [...(byMachine.get(a.machine) ?? []), a]);
    for (const [id, units] of byMachine) {
      const machine = machineRecords.get(id);
      if (!machine) continue;
      const at = `at revision ${revision}, ${id}`;
      if (units.length > machine.capacity.units) found.push(`${at} holds ${units.length} units (capacity ${machine.capacity.units})`);
      const memory = units.reduce((sum, a) => sum + (a.resources?.memoryMB ?? 0), 0);
      if (machine.capacity.memoryMB !== undefined && memory > machine.capacity.memoryMB) found.push(`${at} reserves ${memory} MB (has ${machine.capacity.memoryMB})`);
      const ports = units.flatMap((a) => a.ports.flatMap((p) => (p.host === undefined ? [] : [p.host])));
      const twice = ports.find((port, i) => ports.indexOf(port) !== i);
      if (twice !== undefined) found.push(`${at} binds host port ${twice} twice (${units.map((a) => a.unit).join(', ')})`);
      for (const a of units) {
        const glob = declared.get(a.service)?.conflictsWith;
        if (!glob) continue;
        const clash = units.find((b) => b !== a && compileServiceGlob(glob)(b.service));
        if (clash) found.push(`${at} runs ${a.unit} beside ${clash.unit}, which it conflicts with`);
      }
    }
    return found;
  }

  async function declare(spec: ServiceSpec): Promise<{ release: Release; deployment: Deployment }> {
    const config: ServiceConfig = {
      numInstances: spec.instances,
      ports: [{ container: 80, ...(spec.hostPort ? { host: spec.hostPort } : {}) }],
      env: {},
      ...(spec.memoryMB ? { resources: { memoryMB: spec.memoryMB } } : {}),
    };
    const now = new Date().toISOString();
    const service: Service = {
      name: spec.name,
      uuid: randomUUID(),
      description: '',
      containerImage: `registry.test/${spec.name}`,
      autoDeploy: 'never' as Service['autoDeploy'],
      conflictsWith: spec.conflictsWith ?? '',
      loadBalanced: false,
      publicFacing: false,
      config,
      createdAt: now,
      updatedAt: now,
    };
    declared.set(spec.name, service);
    await store.put(serviceKey(spec.name), JSON.stringify(service));
    const image = `registry.test/${spec.name}@sha256:${'0'.repeat(64)}`;
    const deploymentId = randomUUID();
    const release: Release = { service: spec.name, version: 1, image, digest: `sha256:${'0'.repeat(64)}`, config, pushedAt: 0, deployment: deploymentId, createdAt: now };
    return { release, deployment: await startDeployment(release, 'manual') };
  }

  async function startDeployment(release: Release, trigger: string): Promise<Deployment> {
    const now = new Date().toISOString();
    const deployment: Deployment = { id: randomUUID(), service: release.service, release: release.version, image: release.image, state: 'pending' as Deployment['state'], trigger, units: [], createdAt: now, updatedAt: now };
    await store.put(deploymentKey(deployment.id), JSON.stringify(deployment));
    return deployment;
  }

  /** The newest deployment per service: an older one still rolling out stops as superseded, as the runner's do. */
  const latest = new Map<string, string>();
  /** Runs one rollout the way the scheduler's runner does. */
  async function roll(release: Release, deployment: Deployment): Promise<RolloutOutcome> {
    latest.set(release.service, deployment.id);
    watch.poke();
    return rollOut({ store, log, cluster: watch, applier, isCurrent: () => latest.get(release.service) === deployment.id }, release, deployment);
  }

  /** A machine's lease expired: its record and its agent's reports are gone (its assignments stay until rescheduled). */
  async function loseMachine(id: string): Promise<void> {
    machineRecords.delete(id);
    await store.delete(machineKey(id));
    await store.deletePrefix(unitStatusPrefix(id));
  }

  /** The service's units now, as machine ids. */
  const placements = (service: string): string[] => [...assignments.values()].filter((a) => a.service === service).map((a) => a.machine);

  t.teardown(async () => {
    await agents.close();
    await watch.close();
    await store.close();
  });
  return { store, addMachine, declare, roll, startDeployment, loseMachine, placements, violations, writes: () => writes, assignments };
}

const hostPortRounds = 5;
t.test(`six one-unit services sharing host port 18080, deployed at the same instant on 3 machines: never two on one machine (${hostPortRounds} rounds)`, async (t) => {
  const colocated: number[] = [];
  for (let round = 1; round <= hostPortRounds; round++) {
    await t.test(`round ${round}`, async (t) => {
      const c = await cluster(t, [
        { id: 'm1', units: 10 },
        { id: 'm2', units: 10 },
        { id: 'm3', units: 10 },
      ]);
      const services = await Promise.all(['a', 'b', 'c', 'd', 'e', 'f'].map((x) => c.declare({ name: `port-${x}`, instances: 1, hostPort: 18080 })));
      const outcomes = await Promise.all(services.map(({ release, deployment }) => c.roll(release, deployment)));
      const machines = services.flatMap(({ release }) => c.placements(release.service));
      colocated.push(machines.length - new Set(machines).size);
      t.same(c.violations, [], 'no write ever put two units binding 18080 on one machine');
      t.equal(new Set(machines).size, machines.length, `placed on distinct machines (${machines.join(', ')})`);
      t.equal(outcomes.filter((o) => o.state === 'succeeded').length, 3, 'three services run, one per machine');
      for (const outcome of outcomes.filter((o) => o.state === 'failed')) {
        t.match(outcome, { reason: /host ports free/ }, 'the others fail saying the host port is taken everywhere');
      }
    });
  }
  t.comment(`units sharing a machine with another of port 18080, per round: ${colocated.join(', ')}`);
});

t.test('a machine holding four 100 MB units is lost while four more 100 MB services deploy: no machine takes more memory than it has', async (t) => {
  const c = await cluster(t, [{ id: 'big', units: 10, memoryMB: 400 }]);
  const old = await Promise.all([1, 2, 3, 4].map((i) => c.declare({ name: `old-${i}`, instances: 1, memoryMB: 100 })));
  for (const { release, deployment } of old) t.match(await c.roll(release, deployment), { state: 'succeeded' });
  t.same(old.flatMap(({ release }) => c.placements(release.service)), ['big', 'big', 'big', 'big'], 'the four old units fill the big machine');
  await c.addMachine({ id: 'small-1', units: 10, memoryMB: 150 });
  await c.addMachine({ id: 'small-2', units: 10, memoryMB: 150 });
  const fresh = await Promise.all([1, 2, 3, 4].map((i) => c.declare({ name: `new-${i}`, instances: 1, memoryMB: 100 })));
  // The machine is lost, and its units are healed while the new services deploy.
  await c.loseMachine('big');
  const healing = await Promise.all(old.map(async ({ release }) => ({ release, deployment: await c.startDeployment(release, 'reschedule') })));
  const outcomes = await Promise.all([...healing, ...fresh].map(({ release, deployment }) => c.roll(release, deployment)));
  const placed = [...c.assignments.values()].filter((a) => a.machine !== 'big').map((a) => a.machine);
  t.comment(`placed on the small machines: ${placed.sort().join(', ')}`);
  t.same(c.violations, [], 'no write ever reserved more memory on a machine than it has');
  t.equal(outcomes.filter((o) => o.state === 'succeeded').length, 2, 'two services run, one on each 150 MB machine');
  for (const outcome of outcomes.filter((o) => o.state === 'failed')) t.match(outcome, { reason: /needs 100 MB; the most free on any machine is 50 MB/ });
});

t.test('twelve three-unit services deployed at the same instant on four machines: every machine takes nine units', async (t) => {
  const c = await cluster(t, ['m1', 'm2', 'm3', 'm4'].map((id) => ({ id, units: 100 })));
  const services = await Promise.all(Array.from({ length: 12 }, (_, i) => c.declare({ name: `even-${i}`, instances: 3 })));
  const outcomes = await Promise.all(services.map(({ release, deployment }) => c.roll(release, deployment)));
  t.ok(outcomes.every((o) => o.state === 'succeeded'), 'every service runs');
  // Plans made side by side from one snapshot each chose the three least used machines, the same three.
  const perMachine = ['m1', 'm2', 'm3', 'm4'].map((id) => [...c.assignments.values()].filter((a) => a.machine === id).length);
  t.same(perMachine, [9, 9, 9, 9], `units per machine: ${perMachine.join(', ')}`);
  t.same(c.violations, []);
});

/** A small seeded generator (mulberry32), so a failing round can be run again. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let x = state;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

const propertyRounds = 20;
t.test(`random concurrent rollouts and a machine loss: after every commit, no machine is over capacity, over memory, binds a host port twice or runs two conflicting services (${propertyRounds} rounds)`, async (t) => {
  const seed = Number(process.env.PLAN_APPLIER_SEED ?? Date.now() % 100_000);
  t.comment(`seed ${seed} (PLAN_APPLIER_SEED=${seed} runs these rounds again)`);
  const rng = random(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(rng() * items.length)]!;
  let commits = 0;
  for (let round = 1; round <= propertyRounds; round++) {
    await t.test(`round ${round}`, async (t) => {
      const machines = Array.from({ length: 3 + Math.floor(rng() * 2) }, (_, i): MachineSpec => ({ id: `m${i + 1}`, units: 1 + Math.floor(rng() * 3), ...(rng() < 0.5 ? { memoryMB: pick([150, 200, 300]) } : {}) }));
      const c = await cluster(t, machines);
      const names = Array.from({ length: 5 + Math.floor(rng() * 3) }, (_, i) => `svc-${i + 1}`);
      const specs = names.map((name): ServiceSpec => {
        const conflictsWith = rng() < 0.3 ? pick(names.filter((other) => other !== name)) : rng() < 0.1 ? 'svc-*' : '';
        const hostPort = rng() < 0.4 ? pick([18080, 18081]) : undefined;
        const memoryMB = rng() < 0.5 ? 100 : undefined;
        return { name, instances: 1 + Math.floor(rng() * 2), ...(conflictsWith ? { conflictsWith } : {}), ...(hostPort ? { hostPort } : {}), ...(memoryMB ? { memoryMB } : {}) };
      });
      t.comment(`machines ${JSON.stringify(machines)}; services ${JSON.stringify(specs)}`);
      const deploys = await Promise.all(specs.map((spec) => c.declare(spec)));
      const rollouts = deploys.map(({ release, deployment }) => c.roll(release, deployment));
      let settled = false;
      void Promise.allSettled(rollouts).then(() => (settled = true));
      // A machine is lost part-way through, and the services that had units there are healed at once.
      const lossAfter = 1 + Math.floor(rng() * 6);
      await waitFor(() => settled || c.writes() >= lossAfter, 60_000, { what: `${lossAfter} assignment writes` });
      const lost = pick(machines).id;
      await c.loseMachine(lost);
      const hit = new Set([...c.assignments.values()].filter((a) => a.machine === lost).map((a) => a.service));
      const healing = await Promise.all(deploys.filter(({ release }) => hit.has(release.service)).map(async ({ release }) => c.roll(release, await c.startDeployment(release, 'reschedule'))));
      const outcomes = [...(await Promise.all(rollouts)), ...healing];
      commits += c.writes();
      t.same(c.violations, [], 'no write broke an invariant');
      for (const outcome of outcomes) {
        if (outcome.state === 'failed') t.ok(outcome.reason.length > 0, `failed with a reason: ${outcome.reason}`);
        else t.ok(outcome.state === 'succeeded' || outcome.state === 'superseded', `ended ${outcome.state}`);
      }
    });
  }
  t.comment(`${commits} assignment writes checked`);
});
