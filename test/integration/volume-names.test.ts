import t from 'tap';
import { randomBytes } from 'node:crypto';
import { startEtcd } from '../harness/etcd.js';
import { startDockerd } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { http, serveRole } from '../harness/platform.js';
import { clusterUnits, type ListedUnit } from '../harness/cluster-units.js';

// Whose data a unit's named volume is, on real parts (one agent on a real Docker engine, a real
// etcd and registry): no two (service, instance, volume) triples share a Docker volume, a volume
// that exists labelled for another unit is refused rather than mounted, and a volume named the
// way agents named them before (`<service>-<instance>-<name>`) is still its own unit's.

const etcd = await startEtcd();
const registry = await startRegistry();
const engine = await startDockerd();
const repository = `volumes/app-${randomBytes(3).toString('hex')}`;
const volumeImage = await buildTestImage(engine.docker, registry.host, repository, 'volume', { variant: 'volume' });
const flags = ['--etcd', etcd.url];
const roles = [
  await serveRole('agent', await freePort(), [...flags, '--network', 'host', '--machine-id', 'm1', '--stop-grace', '1', '--drain-seconds', '0'], { DOCKER_HOST: engine.dockerHost }),
  await serveRole('directory', await freePort(), flags),
  await serveRole('scheduler', await freePort(), flags),
];
const orchestrator = await serveRole('orchestrator', await freePort(), flags);
t.teardown(async () => {
  await Promise.all([...roles, orchestrator].map((role) => role.stop()));
  await Promise.all([registry.stop(), etcd.stop()]);
  await engine.stop();
});

const orch = (path: string) => `${orchestrator.url}${path}`;
const { unitsOf, settled, finished } = clusterUnits(orchestrator.url);

async function declareAndDeploy(name: string, volume: string, greeting: string): Promise<{ state: string; reason?: string }> {
  const body = { name, containerRepository: `${registry.host}/${repository}`, volumes: [{ name: volume, path: '/data' }], env: { GREETING: greeting } };
  const created = await http('POST', orch('/services'), body);
  if (created.status !== 201) throw new Error(JSON.stringify(created.body));
  const reply = await http('POST', orch(`/services/${name}/deploy`), { containerRepository: volumeImage.reference });
  if (reply.status !== 200) throw new Error(JSON.stringify(reply.body));
  return finished(reply.body.deployment);
}

const page = async (unit: ListedUnit): Promise<string> => (await fetch(`http://${unit.address}/`, { signal: AbortSignal.timeout(5000) })).text();
const volumeNames = async (): Promise<string[]> => ((await engine.docker.listVolumes()).Volumes ?? []).map((v) => v.Name);

/** A volume made outside the platform, labelled as `labels` says, whose /data/first holds `first`. */
async function presetVolume(name: string, labels: Record<string, string>, first: string): Promise<void> {
  await engine.docker.createVolume({ Name: name, Labels: labels });
  const writer = await engine.docker.createContainer({
    Image: volumeImage.reference,
    Cmd: ['/bin/sh', '-c', `echo ${first} > /data/first`],
    HostConfig: { Mounts: [{ Type: 'volume', Source: name, Target: '/data' }] },
  });
  await writer.start();
  await writer.wait();
  await writer.remove();
}

t.test('service app with volume 1-data and service app-1 with volume data keep apart', async (t) => {
  t.equal((await declareAndDeploy('app', '1-data', 'app')).state, 'succeeded');
  const [first] = await settled('app', 1);
  t.match(await page(first!), /^app-1\.service v1 first v1\/app$/m, 'app wrote its data');

  t.equal((await declareAndDeploy('app-1', 'data', 'other')).state, 'succeeded');
  const [second] = await settled('app-1', 1);
  t.match(await page(second!), /^app-1-1\.service v1 first v1\/other$/m, 'app-1 sees its own, new volume, not app\'s data');
  const names = await volumeNames();
  t.ok(names.includes('app.1.1-data') && names.includes('app-1.1.data'), `two volumes: ${names.join(', ')}`);
});

t.test('a volume that exists labelled for another service is refused, not mounted', async (t) => {
  const foreign = { 'platform.managed': 'true', 'platform.machine': 'm1', 'platform.service': 'victim', 'platform.instance': '1' };
  // Under both the name agents use now and the one they used before.
  await presetVolume('intruder.1.data', foreign, 'victim-secret');
  await presetVolume('intruder-1-data', foreign, 'victim-secret');
  const outcome = await declareAndDeploy('intruder', 'data', 'intruder');
  t.not(outcome.state, 'succeeded', `the deployment does not succeed: ${outcome.reason}`);
  const [unit] = await unitsOf('intruder');
  t.equal(unit?.errorKind, 'refused');
  t.equal(unit?.error, 'volume intruder.1.data exists and is labelled for victim-1, not intruder-1; it is not mounted');
  const mounted = await engine.docker.listContainers({ all: true, filters: { volume: ['intruder.1.data'] } });
  t.same(mounted, [], 'no container mounts it');
});

t.test('a volume under the old name labelled for this unit is adopted with its data', async (t) => {
  await presetVolume('legacy-1-data', { 'platform.managed': 'true', 'platform.machine': 'm1', 'platform.service': 'legacy', 'platform.instance': '1' }, 'v0/kept');
  t.equal((await declareAndDeploy('legacy', 'data', 'fresh')).state, 'succeeded');
  const [unit] = await settled('legacy', 1);
  t.match(await page(unit!), /^legacy-1\.service v1 first v0\/kept$/m, 'the unit found the data its service had');
  t.notOk((await volumeNames()).includes('legacy.1.data'), 'no new volume beside it');
  t.equal((await http('DELETE', orch('/services/legacy?volumes=delete'))).status, 204);
  t.notOk((await volumeNames()).includes('legacy-1-data'), 'removed with the service\'s volumes');
});
