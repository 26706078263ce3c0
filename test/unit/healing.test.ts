import t from 'tap';
import { planHealing, type HealingInput } from '../../src/roles/scheduler/healing/healing.js';
import type { Assignment, Machine } from '../../src/schemas/cluster.js';
import { engineLostAt, machinesAway } from '../../src/roles/scheduler/cluster-snapshot.js';
import type { Deployment } from '../../src/schemas/release.js';

// Self-healing as a pure plan: which services get their current release deployed again.

const machine = (id: string): Machine => ({ id, address: '', host: '', labels: {}, network: 'host', docker: { reachable: true }, capacity: { units: 10 }, unitCount: 0, startedAt: '', updatedAt: '' });
const assignment = (service: string, instance: number, machineId: string): Assignment => ({
  unit: `${service}-${instance}.service`, service, instance, machine: machineId, release: 1, spec: 's', image: 'i', ports: [], env: {}, stopGraceSeconds: 1, deployment: 'd', assignedAt: '',
});
const deployment = (service: string, state: Deployment['state'], trigger = 'manual'): Deployment => ({ id: `${service}-${state}-${trigger}`, service, release: 1, image: 'i', state, trigger, units: [], createdAt: '', updatedAt: '' });

const input = (over: Partial<HealingInput>): HealingInput => ({
  machines: [machine('m1'), machine('m2')],
  assignments: [assignment('web', 1, 'm1'), assignment('web', 2, 'm2')],
  deployments: [deployment('web', 'succeeded')],
  drained: new Set(),
  engineLost: new Set(),
  declared: new Set(['web']),
  busy: () => false,
  instancesOf: () => 2,
  ...over,
});

t.test('a service with all its units in place needs nothing', async (t) => {
  t.same(planHealing(input({})), []);
});

t.test('units on a lost machine are moved, named in the reason', async (t) => {
  t.same(planHealing(input({ machines: [machine('m1')] })), [{ service: 'web', release: 1, why: 'machine lost: moving web-2.service on m2' }]);
});

t.test('units of a machine still in its renewal grace count as in place; past it they are moved', async (t) => {
  t.same(planHealing(input({ machines: [], renewing: new Set(['m1', 'm2']) })), [], 'no machine registered yet, none lost');
  t.same(planHealing(input({ machines: [], renewing: new Set(['m1']) })).map((r) => r.why), ['machine lost: moving web-2.service on m2']);
});

t.test('units of a machine away (its agent stopped on purpose) count as in place until its grace ends', async (t) => {
  t.same(planHealing(input({ machines: [machine('m1')], away: new Set(['m2']) })), [], 'm2 is away and expected back');
  t.same(planHealing(input({ machines: [machine('m1')], away: new Set() })).map((r) => r.why), ['machine lost: moving web-2.service on m2'], 'its grace ended');
  const since = Date.parse('2026-01-01T00:00:00Z');
  const record = { machine: 'm2', since: new Date(since).toISOString(), reason: 'the agent stopped' };
  t.same(machinesAway([record], new Set(), 300_000, since + 299_999), [{ machine: 'm2', since: record.since, until: new Date(since + 300_000).toISOString() }], 'within the grace, with until when');
  t.same(machinesAway([record], new Set(), 300_000, since + 300_000), [], 'at its end the machine is lost');
  t.same(machinesAway([record], new Set(['m2']), 300_000, since), [], 'a machine registered again is back, whatever its record says');
});

t.test('units on a drained machine, or one without an engine past the grace period, are moved; a missing instance is placed again', async (t) => {
  t.same(planHealing(input({ drained: new Set(['m2']) })).map((r) => r.why), ['machine drained: moving web-2.service off m2']);
  t.same(planHealing(input({ engineLost: new Set(['m2']) })).map((r) => r.why), ['machine has no Docker engine: moving web-2.service off m2']);
  t.same(planHealing(input({ assignments: [assignment('web', 1, 'm1')] })).map((r) => r.why), ['units missing: placing them again']);
});

t.test('nothing is healed for a deleted, stopped, busy or never-succeeded service', async (t) => {
  const lost = { machines: [machine('m1')] };
  t.same(planHealing(input({ ...lost, declared: new Set() })), [], 'not declared');
  t.same(planHealing(input({ ...lost, deployments: [deployment('web', 'succeeded', 'stop'), deployment('web', 'succeeded')] })), [], 'stopped');
  t.same(planHealing(input({ ...lost, busy: () => true })), [], 'a rollout is under way');
  t.same(planHealing(input({ ...lost, deployments: [deployment('web', 'failed')] })), [], 'no success to restore');
  t.same(planHealing(input({ ...lost, instancesOf: () => undefined })), [], 'its release is gone');
});

t.test('a machine counts as without an engine only once its outage has lasted the grace period', async (t) => {
  const since = Date.parse('2026-01-01T00:00:00Z');
  const down = { ...machine('m1'), docker: { reachable: false, error: 'gone', unreachableSince: new Date(since).toISOString() } };
  t.notOk(engineLostAt(down, 30_000, since + 29_999), 'within the grace period');
  t.ok(engineLostAt(down, 30_000, since + 30_000), 'at its end');
  t.notOk(engineLostAt(machine('m1'), 30_000, since + 60_000), 'an engine that answers');
  t.notOk(engineLostAt({ ...down, docker: { reachable: false } }, 0, since), 'an agent that does not say since when (an older one) is never moved off');
});

t.test('units that keep volumes are not moved off a lost, drained or engineless machine', async (t) => {
  const keepsVolumes = () => true;
  t.same(planHealing(input({ machines: [machine('m1')], keepsVolumes })), [], 'lost');
  t.same(planHealing(input({ drained: new Set(['m2']), keepsVolumes })), [], 'drained');
  t.same(planHealing(input({ engineLost: new Set(['m2']), keepsVolumes })), [], 'without a Docker engine');
  t.same(planHealing(input({ assignments: [assignment('web', 1, 'm1')], keepsVolumes })).map((r) => r.why), ['units missing: placing them again'], 'a missing instance is still placed');
});
