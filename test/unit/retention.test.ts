import t from 'tap';
import { expiredDeployments, expiredJournalKeys, expiredReleases } from '../../src/roles/scheduler/housekeeping/retention.js';
import type { Deployment, Release } from '../../src/schemas/release.js';

// What the leading scheduler deletes of the history beyond its retention limits.

let sequence = 0;
/** A deployment record; build lists newest first, as the store lists them reversed. */
const deployment = (service: string, state: Deployment['state'], trigger = 'manual'): Deployment => {
  sequence += 1;
  return { id: `d${String(sequence).padStart(3, '0')}`, service, release: sequence, image: `${service}@${sequence}`, state, trigger, units: [], createdAt: '', updatedAt: '' };
};

t.test('keeps the newest finished deployments of each service, deletes the older ones', async (t) => {
  const web = [deployment('web', 'succeeded'), deployment('web', 'failed'), deployment('web', 'succeeded'), deployment('web', 'superseded')];
  const api = [deployment('api', 'succeeded'), deployment('api', 'succeeded')];
  const newestFirst = [...web, ...api].reverse();
  // web: the newest succeeded (the current one) is kept on its own; of the others the newest 2 stay.
  t.same(expiredDeployments(newestFirst, 2).sort(), [web[0]!.id]);
  t.same(expiredDeployments(newestFirst, 1).sort(), [web[0]!.id, web[1]!.id].sort(), 'api keeps its newest succeeded, and one more');
  t.same(expiredDeployments(newestFirst, 10), [], 'nothing while under the limit');
});

t.test('never deletes a deployment in flight, the current one or the last that succeeded', async (t) => {
  const oldGood = deployment('web', 'succeeded');
  const failures = [deployment('web', 'failed'), deployment('web', 'reverted'), deployment('web', 'failed')];
  const rolling = deployment('web', 'rolling');
  const newestFirst = [oldGood, ...failures, rolling].reverse();
  const expired = expiredDeployments(newestFirst, 1);
  t.notOk(expired.includes(rolling.id), 'the rollout in flight stays');
  t.notOk(expired.includes(oldGood.id), 'the last success stays: a failed deploy reverts to it');
  t.same(expired.sort(), [failures[0]!.id, failures[1]!.id].sort(), 'only the older failures go');
});

t.test('a stop record stays while it decides that the service runs nothing', async (t) => {
  const before = deployment('web', 'succeeded');
  const stop = deployment('web', 'succeeded', 'stop');
  const failed = [deployment('web', 'failed'), deployment('web', 'failed')];
  const expired = expiredDeployments([before, stop, ...failed].reverse(), 1);
  t.notOk(expired.includes(stop.id), 'deleting it would make the release before it current again');
  t.same(expired.sort(), [before.id, failed[0]!.id].sort(), 'the success before the stop counts like any finished deployment');
});

t.test('a stop record stays while a later deploy is in flight (it decides again if that one fails)', async (t) => {
  const before = deployment('web', 'succeeded');
  const stop = deployment('web', 'succeeded', 'stop');
  const failed = deployment('web', 'failed');
  const rolling = deployment('web', 'rolling');
  const expired = expiredDeployments([before, stop, failed, rolling].reverse(), 1);
  t.notOk(expired.includes(stop.id));
  t.same(expired, [before.id], 'the success before the stop is no longer needed');
});

t.test("healing's reschedules are counted apart: they never push the user's deployments out", async (t) => {
  const users = [deployment('web', 'succeeded'), deployment('web', 'succeeded', 'rollback'), deployment('web', 'failed')];
  const reschedules = [deployment('web', 'failed', 'reschedule'), deployment('web', 'failed', 'reschedule'), deployment('web', 'failed', 'reschedule')];
  const expired = expiredDeployments([...users, ...reschedules].reverse(), 2);
  t.same(expired, [reschedules[0]!.id], 'only the oldest reschedule beyond its own 2 goes');
  t.same(expiredDeployments([...users, ...reschedules, deployment('web', 'succeeded', 'github')].reverse(), 2).sort(), [users[0]!.id, reschedules[0]!.id].sort(), 'a user deployment goes only for newer user deployments');
});

t.test('journal: the oldest keys beyond the limit', async (t) => {
  const keys = ['a', 'b', 'c', 'd', 'e'];
  t.same(expiredJournalKeys(keys, 3), ['a', 'b']);
  t.same(expiredJournalKeys(keys, 5), []);
  t.same(expiredJournalKeys(keys, 50), []);
});

const release = (version: number): Release => ({ service: 'web', version, image: `web@${version}`, digest: `sha256:${version}`, config: { numInstances: 1, ports: [], env: {} }, pushedAt: 0, deployment: `d${version}`, createdAt: '' });

t.test('keeps the newest releases of a service and the ones its deployments still use', async (t) => {
  const releases = [1, 2, 3, 4, 5, 6].map(release);
  const at = (version: number, state: Deployment['state'], trigger = 'manual'): Deployment => ({ ...deployment('web', state, trigger), release: version });
  // v2 is the last success (what a failure reverts to), v6 failed, v3 rolls out now.
  const newestFirst = [at(2, 'succeeded'), at(6, 'failed'), at(3, 'rolling')].reverse();
  t.same(expiredReleases(releases, newestFirst, 2), [1, 4], 'beyond the newest two, only the unused ones go');
  t.same(expiredReleases(releases, newestFirst, 10), [], 'nothing while under the limit');
  const stopped = [at(2, 'succeeded'), at(2, 'succeeded', 'stop')].reverse();
  t.same(expiredReleases(releases, stopped, 1), [1, 3, 4, 5], 'after a stop, the release it stopped still stays');
});
