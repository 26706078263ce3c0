import t from 'tap';
import { conflicts, placeInstances, type PlannerMachine, type PlacedUnit, type ServiceRules } from '../../src/placement/planner.js';

const machines = (count: number, capacity = 100): PlannerMachine[] =>
  Array.from({ length: count }, (_, i) => ({ id: `m${i + 1}`, capacity }));
const rules = (service: string, conflictsWith = '', hostPorts: number[] = []): ServiceRules => ({ service, conflictsWith, hostPorts });

t.test('units spread over the least-loaded machines', async (t) => {
  const plan = placeInstances({ machines: machines(3), current: [], rules: [rules('web')], service: 'web', instances: [1, 2, 3] });
  t.same(plan.place.map((p) => p.machine).sort(), ['m1', 'm2', 'm3']);
  t.same(plan.unplaced, []);
});

t.test('a replacement prefers the machine its instance runs on', async (t) => {
  const current: PlacedUnit[] = [
    { service: 'web', instance: 1, machine: 'm3' },
    { service: 'web', instance: 2, machine: 'm3' },
  ];
  const plan = placeInstances({ machines: machines(3), current, rules: [rules('web')], service: 'web', instances: [1, 2], preferred: new Map([[1, 'm3'], [2, 'm3']]) });
  t.same(plan.place, [
    { instance: 1, machine: 'm3' },
    { instance: 2, machine: 'm3' },
  ]);
});

t.test('a self-matching conflictsWith glob puts one unit per machine and explains what does not fit', async (t) => {
  const plan = placeInstances({ machines: machines(2), current: [], rules: [rules('web-a', 'web-*')], service: 'web-a', instances: [1, 2, 3] });
  t.equal(plan.place.length, 2);
  t.not(plan.place[0]!.machine, plan.place[1]!.machine);
  t.equal(plan.unplaced.length, 1);
  t.match(plan.unplaced[0]!.reason, /web-a needs 3 machines free of web-\*; 2 qualify/);
  t.match(plan.unplaced[0]!.reason, /m1 runs web-a, which conflicts/);
});

t.test('conflicts hold in both directions', async (t) => {
  t.ok(conflicts(rules('api', 'db*'), rules('db1')));
  t.ok(conflicts(rules('db1'), rules('api', 'db*')));
  t.notOk(conflicts(rules('api'), rules('db1')));
  const current: PlacedUnit[] = [{ service: 'db1', instance: 1, machine: 'm1' }];
  const plan = placeInstances({ machines: machines(2), current, rules: [rules('db1', 'api')], service: 'api', instances: [1] });
  t.same(plan.place, [{ instance: 1, machine: 'm2' }]);
});

t.test('two services with the same fixed host port never share a machine', async (t) => {
  const current: PlacedUnit[] = [{ service: 'a', instance: 1, machine: 'm1' }];
  const plan = placeInstances({ machines: machines(2), current, rules: [rules('a', '', [80]), rules('b', '', [80])], service: 'b', instances: [1, 2] });
  t.same(plan.place.map((p) => p.machine), ['m2']);
  t.equal(plan.unplaced.length, 1);
});

t.test('a machine whose Docker engine is unreachable takes no unit, and the reason says so', async (t) => {
  const plan = placeInstances({
    machines: [{ id: 'm1', capacity: 10, unavailable: 'cannot run units: Docker engine unreachable (connect ENOENT)' }],
    current: [],
    rules: [rules('web')],
    service: 'web',
    instances: [1],
  });
  t.same(plan.place, []);
  t.match(plan.unplaced[0]!.reason, /Docker engine unreachable \(connect ENOENT\)/);
});

t.test('no machines: the reason says no agent is registered', async (t) => {
  const plan = placeInstances({ machines: [], current: [], rules: [], service: 'web', instances: [1] });
  t.match(plan.unplaced[0]!.reason, /no agent is registered/);
});

t.test('capacity is never exceeded', async (t) => {
  const plan = placeInstances({ machines: machines(2, 2), current: [], rules: [], service: 'web', instances: [1, 2, 3, 4, 5] });
  t.equal(plan.place.length, 4);
  t.equal(plan.unplaced.length, 1);
  const perMachine = new Map<string, number>();
  for (const p of plan.place) perMachine.set(p.machine, (perMachine.get(p.machine) ?? 0) + 1);
  t.ok([...perMachine.values()].every((n) => n <= 2));
});

t.test('a preferred machine that no longer qualifies is passed over', async (t) => {
  const plan = placeInstances({ machines: machines(1), current: [], rules: [], service: 'web', instances: [1], preferred: new Map([[1, 'gone']]) });
  t.same(plan.place, [{ instance: 1, machine: 'm1' }]);
});

t.test('a service asking for a platform port as its host port is placed nowhere, and the reason says so', async (t) => {
  const gateway = placeInstances({ machines: machines(2), current: [], rules: [rules('web', '', [8080])], service: 'web', instances: [1, 2] });
  t.same(gateway.place, []);
  t.same(gateway.unplaced.map((u) => u.reason), [1, 2].map(() => 'web asks for host port 8080, which the platform listens on; no unit may bind it'));
  const moved: PlannerMachine[] = [{ id: 'm1', capacity: 10, platformPorts: [8090] }, { id: 'm2', capacity: 10 }];
  const elsewhere = placeInstances({ machines: moved, current: [], rules: [rules('web', '', [8090])], service: 'web', instances: [1] });
  t.same(elsewhere.place, [], 'a port a machine reports its roles listen on counts everywhere');
  t.match(elsewhere.unplaced[0]!.reason, /host port 8090, which the platform listens on/);
});
