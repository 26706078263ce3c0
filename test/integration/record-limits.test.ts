import t from 'tap';
import { http } from '../harness/platform.js';
import { startRolesOnEtcd } from '../harness/roles-on-etcd.js';
import { serviceKey } from '../../src/store/keys.js';

// Limits a merge must not escape, on a real etcd with the directory and the orchestrator as
// `platform serve` processes. The audit's sequence: six PATCH …/config/next of 1,000 new
// variables of about 900 bytes each built a 6,000-variable, 5.4 MB service record.

const { store, roles } = await startRolesOnEtcd(t, { directory: {}, orchestrator: {} });
const { orchestrator } = roles;

const orch = (path: string) => `${orchestrator.url}${path}`;
const variables = (batch: number, count: number, size: number): Record<string, string> =>
  Object.fromEntries(Array.from({ length: count }, (_, i) => [`V${batch}_${i}`, 'x'.repeat(size)]));
const stored = async (name: string) => (await store.get(serviceKey(name)))!;

t.test("the audit's six merges are refused with 413 naming the record limit, and nothing is stored", async (t) => {
  t.equal((await http('POST', orch('/services'), { name: 'merged', containerRepository: 'registry.example.com/merged' })).status, 201);
  const before = await stored('merged');
  for (let batch = 0; batch < 6; batch++) {
    const patch = await http('PATCH', orch('/services/merged/config/next'), { env: variables(batch, 1000, 900) });
    t.equal(patch.status, 413, `merge ${batch + 1}`);
    t.match(patch.body.message, /over the limit of 128 KiB for a service record/);
  }
  const after = await stored('merged');
  t.equal(after.modRevision, before.modRevision, 'the record was not written');
  t.same(JSON.parse(after.value).config.env, {});
});

t.test('merges past 1,000 variables are refused with 400 naming the limit, and nothing is stored', async (t) => {
  t.equal((await http('POST', orch('/services'), { name: 'counted', containerRepository: 'registry.example.com/counted' })).status, 201);
  t.equal((await http('PATCH', orch('/services/counted/config/next'), { env: variables(0, 1000, 8) })).status, 200, 'up to the limit');
  const before = await stored('counted');
  const patch = await http('PATCH', orch('/services/counted/config/next'), { env: variables(1, 1, 8) });
  t.equal(patch.status, 400);
  t.match(patch.body.message, /env must hold at most 1000 entries/);
  t.equal((await stored('counted')).modRevision, before.modRevision, 'the record was not written');
  const replaced = await http('PATCH', orch('/services/counted/config/next'), { env: { ...variables(1, 1, 8), V0_0: null } });
  t.equal(replaced.status, 200, 'a merge that removes one and adds one stays within the limit');
  t.equal(Object.keys(replaced.body.env).length, 1000);
});

t.test('a fresh declaration over the record limit is refused with 413 too', async (t) => {
  const declared = await http('POST', orch('/services'), { name: 'huge', containerRepository: 'registry.example.com/huge', env: variables(0, 700, 900) });
  t.equal(declared.status, 413);
  t.match(declared.body.message, /service huge would be stored as \d+ KiB, over the limit of 128 KiB/);
  t.equal(await store.get(serviceKey('huge')), undefined);
});
