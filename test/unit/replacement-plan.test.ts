import t from 'tap';
import type { Assignment } from '../../src/schemas/cluster.js';
import type { UnitContainer } from '../../src/roles/agent/containers.js';
import { planReplacements, type PlanInput } from '../../src/roles/agent/replacement-plan.js';
import { sampleAssignment } from '../harness/assignment.js';

// Which containers a (restarted) agent adopts, and how it replaces those on the other network mode.

const assignment = (instance: number, overrides: Partial<Assignment> = {}): Assignment =>
  sampleAssignment({ unit: `web-${instance}.service`, instance, ...overrides });

const container = (instance: number, network: 'host' | 'bridge', overrides: Partial<UnitContainer> = {}): UnitContainer => ({
  id: `${network}-${instance}`,
  name: `web-${instance}.service`,
  unit: `web-${instance}.service`,
  spec: '3f2a9c01de',
  release: 3,
  image: 'registry.example/web',
  port: 8080,
  network,
  state: 'running',
  ...overrides,
});

const plan = (input: Partial<PlanInput> & Pick<PlanInput, 'assignments' | 'containers'>) =>
  planReplacements({ network: 'bridge', isReady: () => false, isStopping: () => false, ...input });

const summary = (result: ReturnType<typeof planReplacements>) => ({
  slots: result.slots.map((s) => `${s.assignment.instance}: ${s.container?.id ?? 'create'}${s.run ? '' : ' (waits)'}${s.standIn ? ` beside ${s.standIn.id}` : ''}`),
  retire: result.retire.map((r) => `${r.container.id}${r.handedOver ? ' (handed over)' : ''}`),
});

t.test('a container of an assigned slot on the same network mode is adopted, whatever its release number or labels', async (t) => {
  const adopted = container(1, 'bridge', { release: 1, image: 'made by an older version' });
  t.same(summary(plan({ assignments: [assignment(1)], containers: [adopted] })), { slots: ['1: bridge-1'], retire: [] });
});

t.test('a container no assignment wants is retired; a missing one is created', async (t) => {
  const stray = container(1, 'bridge', { spec: 'other' });
  t.same(summary(plan({ assignments: [assignment(1)], containers: [stray] })), { slots: ['1: create'], retire: ['bridge-1'] });
});

t.test('containers on the other network mode are replaced one at a time per service, the old one serving meanwhile', async (t) => {
  const assignments = [assignment(2), assignment(1), assignment(1, { service: 'api', unit: 'api-1.service' })];
  const api = container(1, 'host', { id: 'api-host', unit: 'api-1.service' });
  const containers = [container(1, 'host'), container(2, 'host'), api];
  t.same(summary(plan({ assignments, containers })), {
    slots: ['1: create beside host-1', '1: create beside api-host', '2: create (waits) beside host-2'],
    retire: [],
  }, 'the first unit of each service starts its replacement; the others wait, served by their old containers');

  const replacement = container(1, 'bridge');
  const starting = plan({ assignments: [assignment(1), assignment(2)], containers: [...containers.slice(0, 2), replacement] });
  t.same(summary(starting), { slots: ['1: bridge-1 beside host-1', '2: create (waits) beside host-2'], retire: [] }, 'not ready yet: the old one stays');

  const ready = plan({ assignments: [assignment(1), assignment(2)], containers: [...containers.slice(0, 2), replacement], isReady: (c) => c.id === 'bridge-1' });
  t.same(summary(ready), { slots: ['1: bridge-1', '2: create (waits) beside host-2'], retire: ['host-1 (handed over)'] }, 'ready: the old one goes');

  const stopping = plan({ assignments: [assignment(1), assignment(2)], containers: [...containers.slice(0, 2), replacement], isStopping: (c) => c.id === 'host-1' });
  t.same(summary(stopping), { slots: ['1: bridge-1', '2: create (waits) beside host-2'], retire: [] }, 'the next waits until the old one is gone');

  const gone = plan({ assignments: [assignment(1), assignment(2)], containers: [container(2, 'host'), replacement] });
  t.same(summary(gone), { slots: ['1: bridge-1', '2: create beside host-2'], retire: [] }, 'then the next unit is replaced');
});

t.test('an old container that does not run is removed at once and its slot runs as usual', async (t) => {
  const exited = container(1, 'host', { state: 'exited' });
  t.same(summary(plan({ assignments: [assignment(1)], containers: [exited] })), { slots: ['1: create'], retire: ['host-1 (handed over)'] });
});

t.test('a unit with volumes or a fixed host port is drained and stopped first, once it is seen serving', async (t) => {
  for (const overrides of [{ volumes: [{ name: 'data', path: '/data' }] }, { ports: [{ container: 8080, host: 8081 }] }]) {
    const assignments = [assignment(1, overrides)];
    const old = container(1, 'host');
    t.same(summary(plan({ assignments, containers: [old] })), { slots: ['1: create (waits) beside host-1'], retire: [] }, 'observed first');
    t.same(summary(plan({ assignments, containers: [old], isReady: () => true })), { slots: ['1: create (waits)'], retire: ['host-1'] }, 'then drained');
    t.same(summary(plan({ assignments, containers: [old], isStopping: () => true })), { slots: ['1: create (waits)'], retire: [] }, 'nothing starts while it stops');
    t.same(summary(plan({ assignments, containers: [] })), { slots: ['1: create'], retire: [] }, 'then the replacement starts');
  }
});
