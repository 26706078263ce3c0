import t from 'tap';
import { failingSinceAfter, type ObservedStatus } from '../../src/roles/agent/status-reporter.js';
import type { UnitStatus } from '../../src/schemas/cluster.js';

// A unit slot's failure episode, as the agent's status reporter carries it from write to write.

const observed = (active: ObservedStatus['active'], sub: ObservedStatus['sub']): ObservedStatus => ({
  unit: 'web-1.service', service: 'web', instance: 1, machine: 'm1', release: 1, spec: 'abc', image: 'reg/web@sha256:1', active, sub, restarts: 0,
});
const written = (status: ObservedStatus, failingSince?: string): UnitStatus => ({ ...status, ...(failingSince ? { failingSince } : {}), updatedAt: 'x' });

t.test('an episode starts at the first failed status and lasts through restarts until the unit runs', async (t) => {
  t.equal(failingSinceAfter(undefined, observed('activating', 'start-pre'), 'T1'), undefined, 'starting is not failing');
  t.equal(failingSinceAfter(written(observed('activating', 'start-pre')), observed('failed', 'auto-restart'), 'T2'), 'T2');
  t.equal(failingSinceAfter(written(observed('failed', 'auto-restart'), 'T2'), observed('activating', 'start-pre'), 'T3'), 'T2', 'restarting within the episode');
  t.equal(failingSinceAfter(written(observed('activating', 'start-pre'), 'T2'), observed('failed', 'auto-restart'), 'T4'), 'T2', 'failing again: the same episode');
  t.equal(failingSinceAfter(written(observed('failed', 'auto-restart'), 'T2'), observed('active', 'running'), 'T5'), undefined, 'running ends it');
  t.equal(failingSinceAfter(written(observed('active', 'running')), observed('failed', 'failed'), 'T6'), 'T6', 'a new failure is a new episode');
});
