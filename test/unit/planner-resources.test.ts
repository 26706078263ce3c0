import t from 'tap';
import { placeInstances, type PlannerMachine, type PlacedUnit, type ServiceRules } from '../../src/placement/planner.js';

// Capacity-aware placement: memory and CPUs are feasibility, spread and binpack are ranking, and
// services with volumes stay where their data is.

const gigabyteMachines = (count: number, extra: Partial<PlannerMachine> = {}): PlannerMachine[] =>
  Array.from({ length: count }, (_, i) => ({ id: `m${i + 1}`, capacity: 100, memoryMB: 1000, cpus: 2, ...extra }));
const web = (extra: Partial<ServiceRules> = {}): ServiceRules => ({ service: 'web', conflictsWith: '', hostPorts: [], ...extra });
const count = (machines: string[]): Record<string, number> => machines.reduce<Record<string, number>>((n, m) => ({ ...n, [m]: (n[m] ?? 0) + 1 }), {});

t.test('units go only where their memory is free; the one beyond capacity names the resource, the amount and the best machine', async (t) => {
  const plan = placeInstances({ machines: gigabyteMachines(3), current: [], rules: [web({ memoryMB: 400 })], service: 'web', instances: [1, 2, 3, 4, 5, 6, 7] });
  t.same(count(plan.place.map((p) => p.machine)), { m1: 2, m2: 2, m3: 2 });
  t.same(plan.unplaced.map((u) => u.instance), [7]);
  t.equal(plan.unplaced[0]!.reason, 'web needs 400 MB; the most free on any machine is 200 MB (m1)');
});

t.test('units of other services count against a machine by what their assignments reserve', async (t) => {
  const current: PlacedUnit[] = [
    { service: 'db', instance: 1, machine: 'm1', memoryMB: 900 },
    { service: 'db', instance: 2, machine: 'm2', memoryMB: 700 },
  ];
  const plan = placeInstances({ machines: gigabyteMachines(2), current, rules: [web({ memoryMB: 512 })], service: 'web', instances: [1] });
  t.same(plan.place, []);
  t.equal(plan.unplaced[0]!.reason, 'web needs 512 MB; the most free on any machine is 300 MB (m2)');
});

t.test('CPUs are counted in exact fractions, and their shortage is named the same way', async (t) => {
  const plan = placeInstances({ machines: gigabyteMachines(1, { cpus: 0.3 }), current: [], rules: [web({ cpus: 0.1 })], service: 'web', instances: [1, 2, 3, 4] });
  t.equal(plan.place.length, 3, 'three tenths fit in 0.3 CPUs (no floating-point creep)');
  t.equal(plan.unplaced[0]!.reason, 'web needs 0.1 CPUs; the most free on any machine is 0 CPUs (m1)');
  const big = placeInstances({ machines: gigabyteMachines(2), current: [], rules: [web({ cpus: 4 })], service: 'web', instances: [1] });
  t.equal(big.unplaced[0]!.reason, 'web needs 4 CPUs; the most free on any machine is 2 CPUs (m1)');
});

t.test('a machine that does not count memory takes any amount', async (t) => {
  const plan = placeInstances({ machines: [{ id: 'm1', capacity: 10 }], current: [], rules: [web({ memoryMB: 100_000, cpus: 64 })], service: 'web', instances: [1, 2] });
  t.equal(plan.place.length, 2);
});

t.test('drained and unreachable machines are not offered as the most free', async (t) => {
  const machines = [...gigabyteMachines(1), { id: 'm2', capacity: 100, memoryMB: 64_000, unavailable: 'is being drained' }];
  const plan = placeInstances({ machines, current: [], rules: [web({ memoryMB: 2000 })], service: 'web', instances: [1] });
  t.equal(plan.unplaced[0]!.reason, 'web needs 2000 MB; the most free on any machine is 1000 MB (m1)');
});

t.test('spread puts each unit on the machine with the fewest; binpack fills one machine before the next', async (t) => {
  const spread = placeInstances({ machines: gigabyteMachines(3), current: [], rules: [web({ memoryMB: 400 })], service: 'web', instances: [1, 2, 3] });
  t.same(count(spread.place.map((p) => p.machine)), { m1: 1, m2: 1, m3: 1 });
  const binpack = placeInstances({ machines: gigabyteMachines(3), current: [], rules: [web({ memoryMB: 400, placement: 'binpack' })], service: 'web', instances: [1, 2, 3] });
  t.same(binpack.place.map((p) => p.machine), ['m1', 'm1', 'm2']);
});

t.test('binpack prefers the machine other units already fill, within its room and conflicts', async (t) => {
  const current: PlacedUnit[] = [{ service: 'db', instance: 1, machine: 'm3', memoryMB: 500 }];
  const plan = placeInstances({ machines: gigabyteMachines(3), current, rules: [web({ memoryMB: 200, placement: 'binpack' }), { service: 'db', conflictsWith: '', hostPorts: [] }], service: 'web', instances: [1, 2, 3, 4] });
  t.same(plan.place.map((p) => p.machine), ['m3', 'm3', 'm1', 'm1']);
  const apart = placeInstances({ machines: gigabyteMachines(3), current, rules: [web({ memoryMB: 200, placement: 'binpack', conflictsWith: 'db' })], service: 'web', instances: [1] });
  t.not(apart.place[0]!.machine, 'm3', 'not next to what it conflicts with');
});

t.test('a unit with volumes goes back to its machine, or nowhere, with the reason', async (t) => {
  const pinned = web({ memoryMB: 400, pinned: true });
  const home = placeInstances({ machines: gigabyteMachines(3), current: [], rules: [pinned], service: 'web', instances: [1], preferred: new Map([[1, 'm3']]) });
  t.same(home.place, [{ instance: 1, machine: 'm3' }]);

  const lost = placeInstances({ machines: gigabyteMachines(2), current: [], rules: [pinned], service: 'web', instances: [1], preferred: new Map([[1, 'm3']]) });
  t.same(lost.place, []);
  t.equal(lost.unplaced[0]!.reason, 'web-1 keeps its volumes on m3, which is lost; it is not moved (volumeMove: allowed moves it)');

  const full: PlacedUnit[] = [{ service: 'db', instance: 1, machine: 'm1', memoryMB: 800 }];
  const crowded = placeInstances({ machines: gigabyteMachines(2), current: full, rules: [pinned], service: 'web', instances: [1], preferred: new Map([[1, 'm1']]) });
  t.equal(crowded.unplaced[0]!.reason, 'web-1 keeps its volumes on m1, which has 200 MB free; it is not moved (volumeMove: allowed moves it)');

  const movable = placeInstances({ machines: gigabyteMachines(2), current: [], rules: [web({ memoryMB: 400 })], service: 'web', instances: [1], preferred: new Map([[1, 'm3']]) });
  t.equal(movable.place.length, 1, 'without pinning a lost machine just means another one');
});

t.test('a service the plan has no rules for reserves nothing and still finds machines that count memory', async (t) => {
  const plan = placeInstances({ machines: gigabyteMachines(2), current: [], rules: [], service: 'web', instances: [1, 2] });
  t.equal(plan.place.length, 2);
});
