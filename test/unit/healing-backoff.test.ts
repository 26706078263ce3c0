import t from 'tap';
import { conditionsOf, decideHeal, endedEpisodes, openEpisode, type BackoffLimits } from '../../src/roles/scheduler/healing/healing-backoff.js';
import type { Machine } from '../../src/schemas/cluster.js';
import type { Deployment } from '../../src/schemas/release.js';

// Backoff of self-healing as pure decisions: when a failed reschedule is tried again, what resets
// the wait, and when a failure episode is over.

const limits: BackoffLimits = { firstMs: 10_000, maxMs: 300_000 };
const at = (seconds: number) => new Date(Date.UTC(2026, 10, 26) + seconds * 1000).toISOString();
const ms = (seconds: number) => Date.parse(at(seconds));

let sequence = 0;
const record = (over: Partial<Deployment>): Deployment => {
  sequence += 1;
  return { id: `d${String(sequence).padStart(3, '0')}`, service: 'web', release: 1, image: 'i', state: 'succeeded', trigger: 'manual', units: [], createdAt: at(0), updatedAt: at(0), ...over };
};
/** A failed reschedule that failed at `failed` s and is due again at `retry` s. */
const episode = (failed: number, retry: number, over: Partial<Deployment> = {}) => record({ trigger: 'reschedule', state: 'failed', finishedAt: at(failed), retryAt: at(retry), reason: 'no engine', ...over });

t.test('no open episode: healing tries at once; a failure then waits the first interval', async (t) => {
  t.same(decideHeal(undefined, ms(0), false, limits), { attempt: true, retryDelayMs: 10_000 });
});

t.test('an open episode waits until its retryAt, then doubles the wait, up to the cap', async (t) => {
  const failed = episode(100, 110);
  t.same(decideHeal(failed, ms(105), false, limits), { attempt: false, dueAt: ms(110) }, 'not before it is due');
  t.same(decideHeal(failed, ms(110), false, limits), { attempt: true, episode: failed, retryDelayMs: 20_000 });
  // The waits one after another, each failure right when it was tried.
  const waits: number[] = [];
  let current = episode(0, 10);
  for (let i = 0; i < 8; i++) {
    const due = Date.parse(current.retryAt!);
    const decision = decideHeal(current, due, false, limits);
    if (!decision.attempt) throw new Error('due, yet not attempted');
    waits.push(decision.retryDelayMs / 1000);
    const failedAt = due / 1000 - ms(0) / 1000;
    current = episode(failedAt, failedAt + decision.retryDelayMs / 1000);
  }
  t.same(waits, [20, 40, 80, 160, 300, 300, 300, 300], 'exponential, capped at 5 minutes');
});

t.test('a change resets the backoff: tried at once, and the wait starts again from the first', async (t) => {
  const failed = episode(0, 300);
  t.same(decideHeal(failed, ms(30), true, limits), { attempt: true, episode: failed, retryDelayMs: 10_000 });
});

t.test('the open episode is the newest record, a failed reschedule of the release healing places, still to be retried', async (t) => {
  const user = record({});
  const failed = episode(0, 10);
  t.equal(openEpisode([failed, user], 1), failed);
  t.equal(openEpisode([failed, user], 2), undefined, 'another release: a new episode');
  t.equal(openEpisode([record({ state: 'failed' }), failed, user], 1), undefined, "a user's deployment since: a new episode");
  t.equal(openEpisode([{ ...failed, retryAt: undefined }, user], 1), undefined, 'an episode that ended');
  t.equal(openEpisode([{ ...failed, state: 'pending' }, user], 1), undefined, 'a retry in flight is not waiting');
  t.equal(openEpisode([], 1), undefined);
});

t.test('an episode ends when a newer deployment comes or its units no longer need placing', async (t) => {
  const web = episode(0, 10);
  const api = episode(0, 10, { service: 'api' });
  const newer = record({ service: 'api', trigger: 'manual', state: 'failed' });
  const list = [newer, web, api];
  t.same(endedEpisodes(list, () => true), [{ episode: api, why: 'a newer deployment came' }]);
  t.same(endedEpisodes(list, (service) => service !== 'web'), [
    { episode: web, why: 'its units are in place' },
    { episode: api, why: 'a newer deployment came' },
  ]);
  t.same(endedEpisodes([{ ...web, retryAt: undefined }], () => false), [], 'an ended one is not ended twice');
});

t.test('conditions: machines, their engines and drains, and the declaration; nothing else', async (t) => {
  const machine = (id: string, reachable: boolean, updatedAt = at(0)): Machine => ({ id, address: '', host: '', labels: {}, network: 'host', docker: { reachable }, capacity: { units: 10 }, unitCount: 0, startedAt: '', updatedAt });
  const base = conditionsOf({ machines: [machine('m1', false)], drained: new Set() }, 7);
  t.equal(conditionsOf({ machines: [machine('m1', false, at(60))], drained: new Set() }, 7), base, 'a machine reporting again, unchanged, is no change');
  for (const [what, changed] of [
    ['its engine back', conditionsOf({ machines: [machine('m1', true)], drained: new Set() }, 7)],
    ['a machine registered', conditionsOf({ machines: [machine('m1', false), machine('m2', true)], drained: new Set() }, 7)],
    ['a drain', conditionsOf({ machines: [machine('m1', false)], drained: new Set(['m1']) }, 7)],
    ['the declaration changed', conditionsOf({ machines: [machine('m1', false)], drained: new Set() }, 8)],
  ] as const) t.not(changed, base, what);
});
