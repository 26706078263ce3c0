import t from 'tap';
import { http, runCli } from '../harness/platform.js';
import { startRolesOnEtcd } from '../harness/roles-on-etcd.js';
import { serviceKey } from '../../src/store/keys.js';

// What a token's scope may reserve (audit L5: a scoped deploy token reserved a whole machine's
// memory and another team's deploy failed; units declared without limits got none). A real etcd,
// the directory (giving units 256 MB when they declare no memory) and the orchestrator as
// `platform serve` processes under --auth auto.

const { store, roles } = await startRolesOnEtcd(t, { directory: { PLATFORM_DEFAULT_UNIT_MEMORY: '256' }, orchestrator: {} });
const { orchestrator } = roles;

const orch = (path: string) => `${orchestrator.url}${path}`;
const bearer = (secret: string) => ({ authorization: `Bearer ${secret}` });
const declare = (name: string, numInstances = 1) => http('POST', orch('/services'), { name, containerRepository: `registry.example.com/${name}`, numInstances });
const patchConfig = (name: string, patch: Record<string, unknown>, secret: string) => http('PATCH', orch(`/services/${name}/config/next`), patch, bearer(secret));
const modRevision = async (name: string) => (await store.get(serviceKey(name)))!.modRevision;

const admin = (await http('POST', orch('/tokens/bootstrap'))).body.secret as string;
const teamA = (await http('POST', orch('/tokens'), { name: 'ci-team-a', role: 'deploy', services: 'team-a-*' }, bearer(admin))).body.secret as string;

t.test('units declared without memory get the directory\'s default limit in their config (what placement reserves and the agent applies)', async (t) => {
  t.equal((await declare('team-b-web', 2)).status, 201);
  const config = (await http('GET', orch('/services/team-b-web/config/next'))).body;
  t.same(config.resources, { memoryMB: 256 });
  const reset = await patchConfig('team-b-web', { resources: { cpus: 0.5 } }, admin);
  t.same(reset.body.resources, { cpus: 0.5, memoryMB: 256 }, 'a config without memory gets it again');
  t.same((await patchConfig('team-b-web', { resources: { memoryMB: 64 } }, admin)).body.resources, { memoryMB: 64 }, 'a declared limit is kept');
});

t.test('only an admin sets quotas; anyone with the read right lists them', async (t) => {
  const refused = await http('PUT', orch('/quotas/team-a-*'), { units: 4, memoryMB: 1024 }, bearer(teamA));
  t.equal(refused.status, 403);
  const set = await http('PUT', orch('/quotas/team-a-*'), { units: 4, memoryMB: 1024 }, bearer(admin));
  t.equal(set.status, 200);
  t.match(set.body, { services: 'team-a-*', units: 4, memoryMB: 1024 });
  t.match((await http('GET', orch('/quotas'), undefined, bearer(teamA))).body, [{ services: 'team-a-*', units: 4, memoryMB: 1024 }]);
  const invalid = await http('PUT', orch('/quotas/team-a-*'), { memory: '4G' }, bearer(admin));
  t.equal(invalid.status, 400);
  t.match(invalid.body.message, /memory is not a known field/);
});

t.test("a scoped token cannot reserve more than its glob's quota: 403 naming the quota, what is asked and what is left; nothing stored", async (t) => {
  t.equal((await declare('team-a-web', 2)).status, 201);
  t.equal((await patchConfig('team-a-web', { numInstances: 4 }, teamA)).status, 200, '4 units of 256 MB: at the quota');
  const before = await modRevision('team-a-web');
  const more = await patchConfig('team-a-web', { numInstances: 5 }, teamA);
  t.equal(more.status, 403);
  t.equal(more.body.message, 'quota team-a-* allows 4 units for its services together: team-a-web would reserve 5, the others use 0, so 4 is left (an admin changes it with platform quota set)');
  const bigger = await patchConfig('team-a-web', { resources: { memoryMB: 512 } }, teamA);
  t.equal(bigger.status, 403);
  t.match(bigger.body.message, /quota team-a-\* allows 1024 MB of memory for its services together: team-a-web would reserve 2048, the others use 0, so 1024 is left/);
  t.equal(await modRevision('team-a-web'), before, 'nothing was stored');
  const another = await declare('team-a-api');
  t.equal(another.status, 403, 'a declaration counts too, even the operator\'s');
  t.match(another.body.message, /team-a-api would reserve 1, the others use 4, so 0 is left/);
  t.equal((await declare('team-c-batch', 10)).status, 201, 'services outside the glob are not bound');
});

t.test('under a lowered quota, changes that reserve no more still pass', async (t) => {
  t.equal((await http('PUT', orch('/quotas/team-a-*'), { units: 2 }, bearer(admin))).status, 200);
  t.equal((await patchConfig('team-a-web', { env: { MODE: 'busy' } }, teamA)).status, 200, 'an env change');
  t.equal((await patchConfig('team-a-web', { numInstances: 3 }, teamA)).status, 200, 'scaling down, still over');
  t.equal((await patchConfig('team-a-web', { numInstances: 3, resources: { memoryMB: 1024 } }, teamA)).status, 200, 'memory is no longer bounded');
  t.equal((await http('DELETE', orch('/quotas/team-a-*'), undefined, bearer(admin))).status, 204);
  t.equal((await patchConfig('team-a-web', { numInstances: 6 }, teamA)).status, 200, 'without a quota');
});

t.test('platform quota set, list and remove', async (t) => {
  const env = { PLATFORM_TOKEN: admin };
  const set = await runCli(orchestrator.url, ['quota', 'set', 'team-d-*', '--units', '20', '--memory', '4g', '--cpus', '4'], env);
  t.equal(set.code, 0, set.stderr);
  t.equal(set.stdout, 'quota team-d-*: 20 units, 4096 MB, 4 CPUs\n');
  const listed = await runCli(orchestrator.url, ['quota', 'list'], env);
  t.match(listed.stdout, /team-d-\*\s+20\s+4096\s+4\s/);
  t.equal((await runCli(orchestrator.url, ['quota', 'remove', 'team-d-*'], env)).code, 0);
  t.match((await runCli(orchestrator.url, ['quota', 'remove', 'team-d-*'], env)).stderr, /no quota for services team-d-\*/);
});
