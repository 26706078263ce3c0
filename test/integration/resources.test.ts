import t from 'tap';
import { randomBytes } from 'node:crypto';
import { startEtcd } from '../harness/etcd.js';
import { startDockerd } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { http, serveRole, type PlatformProcess } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';
import { clusterUnits, isRunning, type ListedUnit } from '../harness/cluster-units.js';

// Resources, capacity-aware placement and volumes on real parts: three agents on one real Docker
// engine (each reporting 1000 MB and 2 CPUs for units, as an operator's cap), a real etcd and
// registry, one scheduler. Limits are checked on the containers Docker made, out-of-memory on a
// unit the kernel killed, volumes on the data a unit wrote.

const TTL = 3;
const etcd = await startEtcd();
const registry = await startRegistry();
const engine = await startDockerd();
const repository = `resources/app-${randomBytes(3).toString('hex')}`;
const [serving, hog, volume] = await Promise.all([
  buildTestImage(engine.docker, registry.host, repository, 'ok'),
  buildTestImage(engine.docker, registry.host, repository, 'hog', { variant: 'memory-hog' }),
  buildTestImage(engine.docker, registry.host, repository, 'volume', { variant: 'volume' }),
]);
const flags = ['--etcd', etcd.url, '--announce-ttl', String(TTL)];
const machineIds = ['m1', 'm2', 'm3'];
type Role = PlatformProcess & { url: string };
const startAgent = async (id: string): Promise<Role> =>
  serveRole('agent', await freePort(), [...flags, '--network', 'host', '--machine-id', id, '--stop-grace', '1', '--drain-seconds', '0', '--capacity-memory', '1000', '--capacity-cpus', '2'], {
    DOCKER_HOST: engine.dockerHost,
  });
const agents = new Map<string, Role>();
for (const id of machineIds) agents.set(id, await startAgent(id));
const directory = await serveRole('directory', await freePort(), flags);
const orchestrator = await serveRole('orchestrator', await freePort(), flags);
const scheduler = await serveRole('scheduler', await freePort(), flags);
t.teardown(async () => {
  await Promise.all([...agents.values(), directory, orchestrator, scheduler].map((role) => role.stop()));
  await Promise.all([registry.stop(), etcd.stop()]);
  await engine.stop();
});

const orch = (path: string) => `${orchestrator.url}${path}`;
const { unitsOf, settled, finished } = clusterUnits(orchestrator.url);

async function declare(name: string, body: Record<string, unknown>): Promise<void> {
  const created = await http('POST', orch('/services'), { name, containerRepository: `${registry.host}/${repository}`, ...body });
  if (created.status !== 201) throw new Error(JSON.stringify(created.body));
}

async function deploy(service: string, reference: string): Promise<string> {
  const reply = await http('POST', orch(`/services/${service}/deploy`), { containerRepository: reference });
  if (reply.status !== 200) throw new Error(JSON.stringify(reply.body));
  return reply.body.deployment;
}

const deployAndWait = async (service: string, reference: string) => finished(await deploy(service, reference));

const containersOf = async (service: string) => engine.docker.listContainers({ all: true, filters: { label: [`platform.service=${service}`] } });
const volumeNames = async (): Promise<string[]> => ((await engine.docker.listVolumes()).Volumes ?? []).map((v) => v.Name);
const page = async (unit: ListedUnit): Promise<string> => (await fetch(`http://${unit.address}/`, { signal: AbortSignal.timeout(5000) })).text();
const remove = async (name: string, query = '') => t.equal((await http('DELETE', orch(`/services/${name}${query}`))).status, 204, `${name} deleted`);

t.test('machines report the memory and CPUs they have for units', async (t) => {
  const machines = await waitFor(async () => {
    const listed = (await http('GET', orch('/cluster/machines'))).body as { id: string; capacity: { memoryMB?: number; cpus?: number } }[];
    return listed.length === 3 ? listed : undefined;
  }, 15_000);
  t.same(machines.map((m) => m.capacity).map(({ memoryMB, cpus }) => ({ memoryMB, cpus })), [1, 2, 3].map(() => ({ memoryMB: 1000, cpus: 2 })));
});

t.test('bad resources or volumes are refused with the field and the rule, and nothing is stored', async (t) => {
  const tooSmall = await http('POST', orch('/services'), { name: 'bad', containerRepository: `${registry.host}/${repository}`, resources: { memoryMB: 0 } });
  t.equal(tooSmall.status, 400);
  t.match(tooSmall.body.message, /^resources\.memoryMB must be an integer number of megabytes from 6/);
  const escape = await http('POST', orch('/services'), { name: 'bad', containerRepository: `${registry.host}/${repository}`, volumes: [{ name: 'data', path: '/data/../etc' }] });
  t.equal(escape.status, 400);
  t.match(escape.body.message, /^volumes\.0\.path must be an absolute path/);
  t.equal((await http('GET', orch('/services/bad'))).status, 404, 'nothing declared');
});

t.test('a unit over its memory limit is reported failed, out of memory with its limit; Docker holds the limits', async (t) => {
  await declare('hog', { resources: { memoryMB: 32, cpus: 0.5 } });
  await deploy('hog', hog.reference);
  const failed = await waitFor(async () => (await unitsOf('hog')).find((u) => u.active === 'failed' && u.errorKind === 'out-of-memory'), 60_000, { what: 'the unit killed for memory' });
  t.equal(failed.error, 'out of memory (limit 32 MB)');
  const [container] = await containersOf('hog');
  const inspected = await engine.docker.getContainer(container!.Id).inspect();
  t.equal(inspected.HostConfig.Memory, 32 * 1024 * 1024, 'memory limit');
  t.equal(inspected.HostConfig.MemorySwap, 32 * 1024 * 1024, 'no swap beyond it');
  t.equal(inspected.HostConfig.NanoCpus, 500_000_000, 'half a CPU');
  await remove('hog');
});

t.test('units fill the machines by memory; the one beyond capacity fails the deployment naming the resource', async (t) => {
  await declare('big', { numInstances: 7, resources: { memoryMB: 400 } });
  const outcome = await deployAndWait('big', serving.reference);
  t.equal(outcome.state, 'failed');
  t.match(outcome.reason, /^big needs 400 MB; the most free on any machine is 200 MB \(m[123]\)$/);
  const units = await settled('big', 6);
  const perMachine = machineIds.map((id) => units.filter((u) => u.machine === id).length);
  t.same(perMachine, [2, 2, 2], 'two 400 MB units on each 1000 MB machine');
  await remove('big');
});

t.test('binpack fills one machine before the next', async (t) => {
  await declare('packed', { numInstances: 3, resources: { memoryMB: 400 }, placement: 'binpack' });
  t.equal((await deployAndWait('packed', serving.reference)).state, 'succeeded');
  const units = await settled('packed', 3);
  const counts = machineIds.map((id) => units.filter((u) => u.machine === id).length).sort();
  t.same(counts, [0, 1, 2], 'two on one machine, one on the next, none on the third');
  await remove('packed');
});

t.test('a unit with a volume keeps its data across a deploy and a restart, and stays on its machine', async (t) => {
  await declare('store', { volumes: [{ name: 'data', path: '/data' }] });
  t.equal((await deployAndWait('store', volume.reference)).state, 'succeeded');
  const [first] = await settled('store', 1);
  t.match(await page(first!), /^store-1\.service v1 first v1\/$/m, 'the first release wrote its file');
  const [declaredNone] = (await containersOf('store')).filter((c) => c.State === 'running');
  const limits = (await engine.docker.getContainer(declaredNone!.Id).inspect()).HostConfig;
  t.equal(limits.Memory, 1024 * 1024 * 1024, 'a unit declared without memory gets the agent’s default limit, 1024 MB (L5)');
  t.ok((await volumeNames()).includes('store.1.data'), 'a Docker named volume <service>.<instance>.<name>');

  t.equal((await http('PATCH', orch('/services/store/config/next'), { env: { GREETING: 'again' } })).status, 200);
  t.equal((await deployAndWait('store', volume.reference)).state, 'succeeded');
  const [second] = await settled('store', 1, 2);
  t.equal(second!.machine, first!.machine, 'redeployed on the same machine');
  t.match(await page(second!), /^store-1\.service v2 first v1\/$/m, 'the new container found the file');

  const [container] = (await containersOf('store')).filter((c) => c.State === 'running');
  await engine.docker.getContainer(container!.Id).kill();
  const restarted = await waitFor(async () => (await unitsOf('store')).find((u) => isRunning(u) && u.restarts >= 1), 30_000, { what: 'unit restarted' });
  t.match(await page(restarted), /first v1\/$/m, 'the file survived the restart');
});

t.test('its machine lost: the unit is reported failed with the reason and not placed elsewhere', async (t) => {
  const [unit] = await unitsOf('store');
  const home = unit!.machine;
  await agents.get(home)!.stop('SIGKILL');
  const lost = await waitFor(async () => (await unitsOf('store')).find((u) => u.active === 'failed' && u.errorKind === 'machine-lost'), 20_000, { what: 'the unit reported lost' });
  t.equal(lost.machine, home);
  t.equal(lost.error, `machine ${home} is lost; the unit keeps its volumes there and is not moved (volumeMove: allowed moves it)`);
  // Healing looks at least every 10 s and on the lease expiring: give it the chance to move it.
  await new Promise((resolve) => setTimeout(resolve, 12_000));
  const units = await unitsOf('store');
  t.same(units.map((u) => u.machine), [home], 'still assigned to its machine only');
  t.equal((await containersOf('store')).length, 1, 'no container started anywhere else');
  const outcome = await deployAndWait('store', serving.reference);
  t.equal(outcome.state, 'reverted');
  t.ok(outcome.reason?.startsWith(`store-1 keeps its volumes on ${home}, which is lost; it is not moved (volumeMove: allowed moves it)`), `a deploy says why it cannot place it: ${outcome.reason}`);

  agents.set(home, await startAgent(home));
  const back = await settled('store', 1);
  t.equal(back[0]!.machine, home, 'running again on its machine once it returns');
  t.match(await page(back[0]!), /first v1\/$/m, 'with its data');
});

t.test('deleting a service keeps its volumes unless asked to remove them', async (t) => {
  await remove('store');
  t.ok((await volumeNames()).includes('store.1.data'), 'kept by default');
  await declare('store', { volumes: [{ name: 'data', path: '/data' }], env: { GREETING: 'fresh' } });
  t.equal((await deployAndWait('store', volume.reference)).state, 'succeeded');
  const [again] = await settled('store', 1);
  t.match(await page(again!), /^store-1\.service v1 first v1\/$/m, 'declared again, the service finds the data of the first declaration');
  await remove('store', '?volumes=delete');
  t.notOk((await volumeNames()).includes('store.1.data'), 'removed with ?volumes=delete');
});
