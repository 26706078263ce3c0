import t, { type Test } from 'tap';
import { planRolloutStep, type RolloutStepInput, type RolloutUnit } from '../../src/placement/rollout-step.js';

const machines = [{ id: 'm1', capacity: 100 }, { id: 'm2', capacity: 100 }, { id: 'm3', capacity: 100 }];
const unit = (instance: number, spec: string, over: Partial<RolloutUnit> = {}): RolloutUnit => ({
  instance, machine: `m${instance}`, spec, running: true, ready: true, alive: true, ...over,
});
const input = (units: RolloutUnit[], over: Partial<RolloutStepInput> = {}): RolloutStepInput => ({
  service: 'web', instances: 3, spec: 'new', maxSurge: 1, maxUnavailable: 0, units, machines,
  cluster: units.map((u) => ({ service: 'web', instance: u.instance, machine: u.machine })), rules: [], ...over,
});

/** Runs steps to completion, applying each (new units become ready at once), and checks the budget after every step. */
function simulate(t: Test, start: RolloutUnit[], over: Partial<RolloutStepInput> = {}) {
  let units = start;
  const base = input(units, over);
  for (let step = 0; step < 20; step++) {
    const result = planRolloutStep(input(units, over));
    if (result.complete) return { steps: step, units };
    units = units.filter((u) => !result.retire.includes(u));
    const serving = new Set(units.filter((u) => u.running).map((u) => u.instance)).size;
    t.ok(serving >= base.instances - base.maxUnavailable, `step ${step}: ${serving} instances serve`);
    units = [...units, ...result.add.map((p) => unit(p.instance, base.spec, { machine: p.machine, ready: false, running: false }))];
    t.ok(units.length <= base.instances + base.maxSurge, `step ${step}: ${units.length} units assigned`);
    // The agents start what was added.
    units = units.map((u) => (u.spec === base.spec ? { ...u, running: true, ready: true } : u));
  }
  throw new Error('rollout did not complete');
}

t.test('a first deploy places every instance at once', async (t) => {
  const step = planRolloutStep(input([]));
  t.same(step.add.map((p) => p.instance), [1, 2, 3]);
  t.notOk(step.complete);
});

t.test('maxSurge 1, maxUnavailable 0: one new unit at a time, the old one goes only when the new one is ready', async (t) => {
  const old = [1, 2, 3].map((i) => unit(i, 'old'));
  const first = planRolloutStep(input(old));
  t.same(first.add.map((p) => p.instance), [1]);
  t.same(first.retire, []);
  const starting = planRolloutStep(input([...old, unit(1, 'new', { ready: false })]));
  t.same(starting.add, [], 'no second surge unit while the first is not ready');
  t.same(starting.retire, []);
  const ready = planRolloutStep(input([...old, unit(1, 'new')]));
  t.same(ready.retire.map((u) => [u.instance, u.spec]), [[1, 'old']]);
  t.same(ready.add.map((p) => p.instance), [2]);
  const result = simulate(t, old);
  t.same(result.units.map((u) => u.spec), ['new', 'new', 'new']);
});

t.test('maxSurge 10 replaces everything in one step', async (t) => {
  const step = planRolloutStep(input([1, 2, 3].map((i) => unit(i, 'old')), { maxSurge: 10 }));
  t.same(step.add.map((p) => p.instance), [1, 2, 3]);
});

t.test('maxSurge 0, maxUnavailable 1 replaces in place one at a time', async (t) => {
  const old = [1, 2, 3].map((i) => unit(i, 'old'));
  const step = planRolloutStep(input(old, { maxSurge: 0, maxUnavailable: 1 }));
  t.same(step.retire.map((u) => u.instance), [1]);
  t.same(step.add.map((p) => p.instance), [1]);
  simulate(t, old, { maxSurge: 0, maxUnavailable: 1 });
});

t.test('scale down removes the highest instances, scale up adds without touching the others', async (t) => {
  const down = planRolloutStep(input([1, 2, 3].map((i) => unit(i, 'new')), { instances: 1 }));
  t.same(down.retire.map((u) => u.instance).sort(), [2, 3]);
  t.same(down.add, []);
  const up = planRolloutStep(input([unit(1, 'new')], { instances: 3 }));
  t.same(up.retire, []);
  t.same(up.add.map((p) => p.instance), [2, 3]);
});

t.test('a rollout is complete only when every instance has one ready unit of the target spec', async (t) => {
  t.ok(planRolloutStep(input([1, 2, 3].map((i) => unit(i, 'new')))).complete);
  t.notOk(planRolloutStep(input([unit(1, 'new'), unit(2, 'new'), unit(3, 'new', { ready: false })])).complete);
  t.notOk(planRolloutStep(input([...[1, 2, 3].map((i) => unit(i, 'new')), unit(3, 'old')])).complete);
});

t.test('units of a lost machine are replaced, and duplicates removed', async (t) => {
  const step = planRolloutStep(input([unit(1, 'new'), unit(2, 'new', { alive: false }), unit(3, 'new'), unit(3, 'new', { machine: 'm1', ready: false, running: false })]));
  t.same(step.retire.map((u) => [u.instance, u.machine]).sort(), [[2, 'm2'], [3, 'm1']]);
  t.same(step.add.map((p) => p.instance), [2]);
});

t.test('a crashed old unit is replaced without waiting for the surge budget', async (t) => {
  const units = [unit(1, 'old', { running: false, ready: false }), unit(2, 'old'), unit(3, 'old'), unit(2, 'new', { ready: false })];
  const step = planRolloutStep(input(units));
  t.same(step.add.map((p) => p.instance), [1]);
  t.same(step.retire.map((u) => [u.instance, u.spec]), [[1, 'old']]);
});

t.test('a surge unit that cannot be placed is reported with the reason', async (t) => {
  const old = [1, 2, 3].map((i) => unit(i, 'old'));
  const step = planRolloutStep(input(old, { rules: [{ service: 'web', conflictsWith: 'web', hostPorts: [] }] }));
  t.same(step.add, []);
  t.match(step.unplaced[0]!.reason, /web needs 4 machines free of web; 3 qualify/);
});

t.test('a unit on a machine being drained moves: its replacement runs elsewhere before it is retired', async (t) => {
  // Machine m1 is drained: the planner sees it unavailable, and its unit is evicted.
  const drainedMachines = [{ id: 'm1', capacity: 100, unavailable: 'is being drained' }, machines[1]!, machines[2]!];
  const current = [unit(1, 'new', { evicted: true }), unit(2, 'new'), unit(3, 'new')];
  const first = planRolloutStep(input(current, { machines: drainedMachines }));
  t.notOk(first.complete, 'not complete while a unit runs on a drained machine');
  t.same(first.retire, [], 'the evicted unit keeps serving until its replacement is ready');
  t.same(first.add.map((p) => p.instance), [1]);
  t.not(first.add[0]!.machine, 'm1', 'the replacement goes to another machine');
  const replaced = planRolloutStep(input([...current, unit(1, 'new', { machine: first.add[0]!.machine })], { machines: drainedMachines }));
  t.same(replaced.retire.map((u) => [u.instance, u.machine]), [[1, 'm1']], 'then the evicted unit is retired');
  t.same(replaced.add, []);
  const done = planRolloutStep(input([current[1]!, current[2]!, unit(1, 'new', { machine: first.add[0]!.machine })], { machines: drainedMachines }));
  t.ok(done.complete);
});

t.test('with nowhere else to go, an evicted unit stays and the step says why', async (t) => {
  const onlyDrained = [{ id: 'm1', capacity: 100, unavailable: 'is being drained' }];
  const step = planRolloutStep(input([unit(1, 'new', { evicted: true })], { instances: 1, machines: onlyDrained }));
  t.same(step.retire, []);
  t.same(step.add, []);
  t.match(step.unplaced[0]?.reason, /is being drained/);
});

t.test("a superseded deployment's unit that never became ready goes at once and frees its surge slot", async (t) => {
  // v2 serves on every instance; v3's surge unit for instance 1 crashes; now v1 is the target.
  const units = [unit(1, 'v2'), unit(2, 'v2'), unit(3, 'v2'), unit(1, 'v3', { machine: 'm2', running: false, ready: false })];
  const step = planRolloutStep(input(units, { spec: 'v1' }));
  t.same(step.retire.map((u) => [u.instance, u.spec]), [[1, 'v3']], 'the crashing v3 unit is retired');
  t.same(step.add.map((p) => p.instance), [1], 'and the surge slot it held goes to v1');
  const result = simulate(t, units, { spec: 'v1' });
  t.same(result.units.map((u) => u.spec).sort(), ['v1', 'v1', 'v1']);
});

t.test('of two old units of one instance that run, one is kept while the target starts', async (t) => {
  const units = [unit(1, 'v2'), unit(1, 'v3', { machine: 'm2', ready: false }), unit(2, 'v2'), unit(3, 'v2')];
  const step = planRolloutStep(input(units, { spec: 'v1' }));
  t.same(step.retire.map((u) => [u.instance, u.spec]), [[1, 'v3']], 'the one not ready goes, the ready one keeps serving');
  t.same(step.add.map((p) => p.instance), [1]);
});

t.test('an old unit that does not run is kept while nothing else of its instance runs (it may be restarting)', async (t) => {
  const units = [unit(1, 'v2', { running: false, ready: false }), unit(2, 'v2'), unit(3, 'v2'), unit(1, 'new', { machine: 'm2', running: false, ready: false })];
  const step = planRolloutStep(input(units));
  t.same(step.retire, [], 'nothing of instance 1 runs: nothing is retired yet');
});

t.test('units with volumes: a lost machine keeps its unit, asked for again there, with the reason', async (t) => {
  const pinned = [{ service: 'web', conflictsWith: '', hostPorts: [], pinned: true }];
  const units = [unit(1, 'new'), unit(2, 'new'), unit(3, 'new', { alive: false, running: false, ready: false })];
  const step = planRolloutStep(input(units, { rules: pinned, machines: machines.slice(0, 2) }));
  t.same(step.retire, [], 'the unit of the lost machine keeps its assignment');
  t.same(step.add, [], 'and is not placed elsewhere');
  t.same(step.unplaced, [{ instance: 3, reason: 'web-3 keeps its volumes on m3, which is lost; it is not moved (volumeMove: allowed moves it)' }]);
  t.notOk(step.complete);

  const movable = planRolloutStep(input(units, { machines: machines.slice(0, 2) }));
  t.same(movable.retire.map((u) => u.instance), [3], 'without volumes it goes');
  t.equal(movable.add.length, 1, 'and its instance is placed on a live machine');
});

t.test('units with volumes are replaced on their machine; one whose machine cannot take the successor keeps running', async (t) => {
  const pinned = [{ service: 'web', conflictsWith: '', hostPorts: [], pinned: true, memoryMB: 600 }];
  const old = [1, 2, 3].map((i) => unit(i, 'old'));
  const roomy = machines.map((m) => ({ ...m, memoryMB: 1000 }));
  const cluster = old.map((u) => ({ service: 'web', instance: u.instance, machine: u.machine, memoryMB: 600 }));
  const step = planRolloutStep(input(old, { rules: pinned, machines: roomy, cluster, maxSurge: 0, maxUnavailable: 1 }));
  t.same(step.add, [{ instance: 1, machine: 'm1' }], 'in place: the old unit goes, freeing its room for the new one');
  t.same(step.retire.map((u) => u.instance), [1]);

  const crowded = [...cluster, { service: 'db', instance: 1, machine: 'm1', memoryMB: 500 }];
  const stuck = planRolloutStep(input(old, { rules: pinned, machines: roomy, cluster: crowded, maxSurge: 0, maxUnavailable: 1 }));
  t.same(stuck.retire, [], 'the old unit stays where its data is');
  t.match(stuck.unplaced[0]!.reason, /^web-1 keeps its volumes on m1, which has 500 MB free/);
});
