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
