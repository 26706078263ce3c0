import t from 'tap';
import { checkPlan, type PlanCheckInput } from '../../src/placement/plan-check.js';
import { placeInstances, type PlannerMachine, type PlacedUnit, type ServiceRules } from '../../src/placement/planner.js';

// The plan applier's check: a plan made from an older snapshot is refused when the units placed
// since leave no room for it, by the planner's own rules; one that still fits passes.

const machines = (count: number, machine: Partial<PlannerMachine> = {}): PlannerMachine[] =>
  Array.from({ length: count }, (_, i) => ({ id: `m${i + 1}`, capacity: 10, ...machine }));
const rules = (service: string, more: Partial<ServiceRules> = {}): ServiceRules => ({ service, conflictsWith: '', hostPorts: [], ...more });
const check = (input: Partial<PlanCheckInput> & Pick<PlanCheckInput, 'service' | 'place'>) => checkPlan({ machines: machines(2), current: [], rules: [], ...input });

t.test('a plan that still fits passes', async (t) => {
  t.same(check({ service: 'web', rules: [rules('web')], place: [{ instance: 1, machine: 'm1' }, { instance: 2, machine: 'm2' }] }), []);
});

t.test('a host port another service took on that machine since the plan was made refuses the unit', async (t) => {
  const current: PlacedUnit[] = [{ service: 'port-a', instance: 1, machine: 'm1' }];
  const refusals = check({ service: 'port-b', current, rules: [rules('port-a', { hostPorts: [18080] }), rules('port-b', { hostPorts: [18080] })], place: [{ instance: 1, machine: 'm1' }] });
  t.same(refusals, [{ instance: 1, machine: 'm1', reason: 'port-b-1 does not fit on m1, which runs port-a, which conflicts' }]);
  t.same(check({ service: 'port-b', current, rules: [rules('port-a', { hostPorts: [18080] }), rules('port-b', { hostPorts: [18080] })], place: [{ instance: 1, machine: 'm2' }] }), [], 'the other machine is free');
});

t.test('conflictsWith is checked in both directions', async (t) => {
  const current: PlacedUnit[] = [{ service: 'db', instance: 1, machine: 'm1' }];
  t.equal(check({ service: 'api', current, rules: [rules('db'), rules('api', { conflictsWith: 'db' })], place: [{ instance: 1, machine: 'm1' }] }).length, 1, "the new unit's glob names the running one");
  t.equal(check({ service: 'api', current, rules: [rules('db', { conflictsWith: 'api' }), rules('api')], place: [{ instance: 1, machine: 'm1' }] }).length, 1, "the running unit's glob names the new one");
});

t.test('units beyond the capacity in units are refused, counting the plan’s own earlier units', async (t) => {
  const current: PlacedUnit[] = [{ service: 'other', instance: 1, machine: 'm1' }];
  const refusals = checkPlan({ machines: machines(1, { capacity: 2 }), current, rules: [rules('web')], service: 'web', place: [{ instance: 1, machine: 'm1' }, { instance: 2, machine: 'm1' }] });
  t.same(refusals, [{ instance: 2, machine: 'm1', reason: 'web-2 does not fit on m1, which is full' }]);
});

t.test('memory: units placed since the plan was made leave too little', async (t) => {
  const current: PlacedUnit[] = [{ service: 'new-1', instance: 1, machine: 'm1', memoryMB: 100 }];
  const refusals = checkPlan({ machines: machines(1, { memoryMB: 150 }), current, rules: [rules('new-1', { memoryMB: 100 }), rules('old-1', { memoryMB: 100 })], service: 'old-1', place: [{ instance: 1, machine: 'm1' }] });
  t.same(refusals, [{ instance: 1, machine: 'm1', reason: 'old-1-1 does not fit on m1, which has 50 MB free' }]);
});

t.test('a machine drained or lost since the plan was made takes nothing', async (t) => {
  const drained = checkPlan({ machines: [{ id: 'm1', capacity: 10, unavailable: 'is being drained' }], current: [], rules: [rules('web')], service: 'web', place: [{ instance: 1, machine: 'm1' }] });
  t.same(drained.map((r) => r.reason), ['web-1 does not fit on m1, which is being drained']);
  const lost = checkPlan({ machines: [], current: [], rules: [rules('web')], service: 'web', place: [{ instance: 1, machine: 'm1' }] });
  t.same(lost.map((r) => r.reason), ['web-1 does not fit on m1, which is not registered']);
});

t.test('what the planner places against a state, the check of that same state accepts', async (t) => {
  // The applier refuses only what changed since: were the two to disagree, a rollout would be refused forever.
  const current: PlacedUnit[] = [
    { service: 'db', instance: 1, machine: 'm1', memoryMB: 200 },
    { service: 'port-a', instance: 1, machine: 'm2' },
  ];
  const all = [rules('db', { memoryMB: 200 }), rules('port-a', { hostPorts: [18080] }), rules('web', { conflictsWith: 'db', hostPorts: [18080], memoryMB: 100 })];
  const cluster = machines(4, { capacity: 3, memoryMB: 300 });
  const planned = placeInstances({ machines: cluster, current, rules: all, service: 'web', instances: [1, 2, 3] });
  t.same(planned.place.map((p) => p.machine).sort(), ['m3', 'm4']);
  t.same(checkPlan({ machines: cluster, current, rules: all, service: 'web', place: planned.place }), []);
});
