import t from 'tap';
import { applyConfigPatch } from '../../src/roles/directory/config-patch.js';

const base = { numInstances: 2, ports: [{ container: 80 }], env: { A: '1', B: '2' } };

t.test('env keys merge, null removes one, others stay', async (t) => {
  t.same(applyConfigPatch(base, { env: { B: null, C: '3' } }), { numInstances: 2, ports: [{ container: 80 }], env: { A: '1', C: '3' } });
});

t.test('null resets numInstances and ports to defaults and clears env', async (t) => {
  t.same(applyConfigPatch(base, { numInstances: null, ports: null, env: null }), { numInstances: 1, ports: [], env: {} });
});

t.test('the input config is not modified', async (t) => {
  applyConfigPatch(base, { env: { A: 'x' } });
  t.equal(base.env.A, '1');
});

t.test('rollout settings are set and reset to their defaults with null', async (t) => {
  const set = applyConfigPatch(base, { maxSurge: 3, healthCheck: { path: '/healthz' }, autoRevert: false });
  t.match(set, { maxSurge: 3, healthCheck: { path: '/healthz' }, autoRevert: false });
  const reset = applyConfigPatch(set, { maxSurge: null, healthCheck: null });
  t.notOk('maxSurge' in reset);
  t.notOk('healthCheck' in reset);
  t.equal(reset.autoRevert, false);
});

t.test('maxSurge and maxUnavailable cannot both be 0', async (t) => {
  t.throws(() => applyConfigPatch(base, { maxSurge: 0 }), /maxSurge and maxUnavailable cannot both be 0/);
  t.same(applyConfigPatch(base, { maxSurge: 0, maxUnavailable: 1 }).maxUnavailable, 1);
});

t.test('the merged config keeps the limits of a declaration: 1,000 variables at most', async (t) => {
  const full = { ...base, env: Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`V${i}`, 'x'])) };
  t.throws(() => applyConfigPatch(full, { env: { ONE_MORE: 'x' } }), { statusCode: 400, message: /after this patch the config would break a limit of a declaration: env must hold at most 1000 entries/ });
  t.equal(Object.keys(applyConfigPatch(full, { env: { ONE_MORE: 'x', V0: null } }).env).length, 1000);
});

t.test('rollout.strategy handover with its timeout is set as a whole; a bad strategy or timeout is refused naming the field', async (t) => {
  const set = applyConfigPatch(base, { rollout: { strategy: 'handover', handoverTimeout: 45 } });
  t.same(set.rollout, { strategy: 'handover', handoverTimeout: 45 });
  t.notOk('rollout' in applyConfigPatch(set, { rollout: null }), 'null resets it to rolling');
  t.throws(() => applyConfigPatch(base, { rollout: { strategy: 'recreate' as 'handover' } }), /rollout\/strategy|rollout\.strategy/);
  t.throws(() => applyConfigPatch(base, { rollout: { handoverTimeout: 0 } }), /handoverTimeout/);
});

t.test('a release command is set and removed whole; its timeout is at most 24h', async (t) => {
  const withCommand = applyConfigPatch(base, { releaseCommand: ['sh', '-c', 'migrate'], releaseCommandTimeout: '15m' });
  t.same(withCommand.releaseCommand, ['sh', '-c', 'migrate']);
  t.equal(withCommand.releaseCommandTimeout, '15m');
  t.same(applyConfigPatch(withCommand, { releaseCommand: null, releaseCommandTimeout: null }), base, 'null removes both');
  t.throws(() => applyConfigPatch(base, { releaseCommandTimeout: '25h' }), { statusCode: 400, message: /releaseCommandTimeout must be at most 24h, got 25h/ });
});
