import t from 'tap';
import { http } from '../harness/platform.js';
import { startRolesOnEtcd } from '../harness/roles-on-etcd.js';

// One scoped token must not fill the store (audit H5: 112 config patches of 480 KB filled a 64 MiB
// etcd quota in 17 s, and every write of the cluster failed after). A real etcd with a 40 MiB
// quota, the directory, the scheduler and the orchestrator as `platform serve` processes under --auth auto, a
// write budget of 4 MiB a token and a store space limit of 16 MiB (set through the environment).

const MiB = 1024 ** 2;
const QUOTA_BYTES = 40 * MiB;
const env = { PLATFORM_WRITE_BUDGET: '4m', PLATFORM_STORE_SPACE_LIMIT: '16m' };
const { etcd, store, roles } = await startRolesOnEtcd(t, { directory: env, orchestrator: env, scheduler: env }, { quotaBackendBytes: QUOTA_BYTES });
const { directory, orchestrator } = roles;

const orch = (path: string) => `${orchestrator.url}${path}`;
const bearer = (secret: string) => ({ authorization: `Bearer ${secret}` });
/** About 110 KB of env, different on every call: each patch makes etcd keep a new revision of the record. */
const bigEnv = (round: number): Record<string, string> =>
  Object.fromEntries(Array.from({ length: 120 }, (_, i) => [`V${i}`, String(round % 10).repeat(900)]));
/** Patches `service`'s config with big env until a patch is refused (or `most` patches pass): the refusal and how many passed. */
async function patchUntilRefused(service: string, headers: Record<string, string>, most: number) {
  for (let round = 0; round < most; round++) {
    const reply = await http('PATCH', orch(`/services/${service}/config/next`), { env: bigEnv(round) }, headers);
    if (reply.status !== 200) return { reply, passed: round };
  }
  return { reply: undefined, passed: most };
}
const maintenance = async (call: string, body: unknown): Promise<any> =>
  (await fetch(`${etcd.url}/v3/maintenance/${call}`, { method: 'POST', body: JSON.stringify(body) })).json();
const alarms = async (): Promise<unknown[]> => (await maintenance('alarm', { action: 'GET' })).alarms ?? [];

const admin = (await http('POST', orch('/tokens/bootstrap'))).body.secret as string;

t.test("a scoped deploy token's big config patches are refused with 429 naming its budget; the admin's writes go on", async (t) => {
  t.equal((await http('POST', orch('/services'), { name: 'team-a', containerRepository: 'registry.example.com/team-a' })).status, 201);
  const created = await http('POST', orch('/tokens'), { name: 'ci-team-a', role: 'deploy', services: 'team-a' }, bearer(admin));
  t.equal(created.status, 201, created.body.message);
  // 40 MiB of quota over 110 KB patches: without a budget, a few hundred patches fill it.
  const { reply, passed } = await patchUntilRefused('team-a', bearer(created.body.secret), 600);
  t.equal(reply?.status, 429, `refused after ${passed} patches: ${JSON.stringify(reply?.body)}`);
  t.match(reply?.body.message, /token ci-team-a is over its write budget of 4096 KiB per 3600 s \(--write-budget\)/);
  t.ok(Number(reply?.headers.get('retry-after')) > 0, 'Retry-After says when');
  t.ok(passed >= 30 && passed <= 40, `4 MiB of 110 KB patches: ${passed} passed`);
  t.same(await alarms(), [], 'etcd raised no alarm');
  // The scheduler counts its own calls (another process): a deploy copies the config into a
  // release and an assignment a unit, so each costs about 2 × 107 KB of its 4 MiB. The registry
  // is refused by policy, after the charge, so no deploy leaves this machine.
  let deploys = 0;
  let deploy;
  do deploy = await http('POST', orch('/services/team-a/deploy'), { containerRepository: '127.0.0.1:1/team-a' }, bearer(created.body.secret));
  while (deploy.status !== 429 && ++deploys < 40);
  t.equal(deploy.status, 429, `deploys are charged too: refused after ${deploys}: ${JSON.stringify(deploy.body)}`);
  t.match(deploy.body.message, /token ci-team-a is over its write budget/);
  t.ok(deploys >= 15 && deploys <= 21, `4 MiB of deploys of 2 × 107 KB: ${deploys} passed`);
  const other = await http('POST', orch('/services'), { name: 'team-b', containerRepository: 'registry.example.com/team-b' }, bearer(admin));
  t.equal(other.status, 201, "the admin's service creation works");
  t.equal((await http('PATCH', orch('/services/team-a/config/next'), { env: { SMALL: 'x' } })).status, 200, "the operator's local call is not counted");
});

t.test('above the store space limit API writes get 507 naming the store space, long before etcd\'s quota; deletes still work', async (t) => {
  t.equal((await http('POST', orch('/services'), { name: 'filler', containerRepository: 'registry.example.com/filler' })).status, 201);
  // The operator's local calls have no budget: only the space limit stops them.
  const { reply, passed } = await patchUntilRefused('filler', {}, 600);
  t.equal(reply?.status, 507, `refused after ${passed} patches: ${JSON.stringify(reply?.body)}`);
  t.match(reply?.body.message, /the key-value store's space is at [\d.]+ MiB, over the platform's limit of 16.0 MiB \(--store-space-limit\)/);
  t.same(await alarms(), [], 'etcd raised no alarm');
  const dbSize = Number((await maintenance('status', {})).dbSize);
  t.ok(dbSize >= 16 * MiB && dbSize < QUOTA_BYTES, `the store holds ${dbSize} bytes, under etcd's quota`);
  t.equal((await http('POST', orch('/services'), { name: 'late', containerRepository: 'registry.example.com/late' })).status, 507, 'a declaration too');

  const ready = await http('GET', `${directory.url}/readyz`);
  t.equal(ready.status, 200, 'the directory still serves reads and deletes');
  t.match(ready.body.storeSpace, { limitBytes: 16 * MiB, warning: /over its limit: API writes are refused with 507/ });
  const metrics = await (await fetch(`${directory.url}/metrics`)).text();
  t.match(metrics, /^platform_store_db_size_bytes \d+/m);
  t.match(metrics, new RegExp(`^platform_store_space_limit_bytes ${16 * MiB}$`, 'm'));

  t.equal((await http('DELETE', `${directory.url}/services/filler`)).status, 204, 'a delete frees space and is not refused');
  await store.put('/platform/test/own-write', 'the platform\'s own writes go on');
  t.equal((await store.get('/platform/test/own-write'))?.value, "the platform's own writes go on");
});
