import t from 'tap';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { startDockerd } from '../harness/docker.js';
import { startEtcd } from '../harness/etcd.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { http, nodeFlagsOf, platformBin } from '../harness/platform.js';
import { buildPlatformImage, makeNodeBaseImage, repositoryRoot, runRoleContainer, waitAnswering, type RoleContainer } from '../harness/platform-image.js';
import { ensureCommand } from '../harness/system-packages.js';
import { waitFor } from '../harness/wait.js';

// The container image (Dockerfile, .dockerignore) built on a test engine from a base image made of
// this machine's Node runtime, its roles run as containers against the test etcd, and the seed flow
// through them: declare, deploy from the test registry, units running, listed, deleted. compose.yaml
// is checked by docker-compose itself.

t.test('docker-compose config accepts compose.yaml: the development layout, the agent on the host network', async (t) => {
  ensureCommand('docker-compose', 'docker-compose');
  const compose = (...args: string[]) => spawnSync('docker-compose', ['-f', join(repositoryRoot, 'compose.yaml'), ...args], { encoding: 'utf8' });
  const config = compose('config');
  t.equal(config.status, 0, config.stderr);
  t.same(compose('config', '--services').stdout.split('\n').filter(Boolean).sort(), ['agent', 'directory', 'etcd', 'gateway', 'orchestrator', 'scheduler', 'web']);
  const service = (name: string) => new RegExp(`\\n  ${name}:\\n((?:    .*\\n|\\s*- .*\\n)*)`).exec(config.stdout)?.[1] ?? '';
  // docker-compose renders a published port as `ip:host:container/tcp`, or as published/target without an ip.
  const publishes = (port: number) => new RegExp(`\\b${port}:${port}/tcp|published: ${port}\\n\\s+target: ${port}`);
  t.match(service('etcd'), publishes(4001), 'etcd publishes 4001');
  t.match(service('etcd'), publishes(7001), 'etcd publishes 7001');
  for (const [role, port] of [['orchestrator', 9000], ['directory', 9001], ['scheduler', 9002], ['agent', 9003], ['web', 9004], ['gateway', 8080]] as const) {
    t.match(service(role), new RegExp(`- --role\\n\\s+- ${role}\\n\\s+- --port\\n\\s+- '${port}'`), `${role} serves on ${port}`);
  }
  t.match(service('agent'), /network_mode: host/, 'the agent probes units on the host, where their ports are published');
  t.match(service('agent'), /\/var\/run\/docker\.sock:\/var\/run\/docker\.sock/);
});

const engine = await startDockerd();
const etcd = await startEtcd();
const registry = await startRegistry();
const containers: RoleContainer[] = [];
t.teardown(async () => {
  await Promise.all(containers.map((container) => container.remove().catch(() => undefined)));
  await registry.stop();
  await etcd.stop();
  await engine.stop(); // its data root, every image built here included, goes with it
});

const base = await makeNodeBaseImage(engine.docker);
const build = await buildPlatformImage(engine, base, 'platform-test/platform:latest');
t.comment(`image built in ${build.seconds.toFixed(0)} s: context ${(build.contextBytes / 1e6).toFixed(1)} MB, image ${(build.imageBytes / 1e6).toFixed(0)} MB`);

t.test('the image builds from BASE_IMAGE with a small context, exposes every default port, and holds no dev dependency', async (t) => {
  t.ok(build.contextBytes < 5e6, `the context is ${build.contextBytes} bytes: no node_modules, tests or docs`);
  const image = await engine.docker.getImage(build.tag).inspect();
  t.same(Object.keys(image.Config.ExposedPorts ?? {}).sort(), ['8080/tcp', '8443/tcp', '9000/tcp', '9001/tcp', '9002/tcp', '9003/tcp', '9004/tcp']);
  // Node's flags as every launcher gives them (bin/platform's shebang; node-flags.test keeps them the same).
  t.same(image.Config.Entrypoint, ['node', ...nodeFlagsOf(platformBin), 'bin/platform']);
  const probe = await engine.docker.createContainer({
    Image: build.tag,
    Entrypoint: ['sh', '-c', 'test -f dist/src/cli.js && test -f dist/src/web/index.html && test -d node_modules/fastify && test ! -e node_modules/typescript && test ! -e node_modules/tap && test ! -e src && test ! -e dist/test'],
    HostConfig: { NetworkMode: 'host' },
  });
  await probe.start();
  t.equal((await probe.wait()).StatusCode, 0, 'the built CLI and dashboard, production modules only, no sources or tests');
  await probe.remove();
});

t.test('directory, scheduler, orchestrator and an agent in containers carry a deploy from declaration to running units', async (t) => {
  const flags = ['--etcd', etcd.url, '--announce-ttl', '3'];
  const machineId = `image-${randomBytes(2).toString('hex')}`;
  const start = async (role: string, options: Parameters<typeof runRoleContainer>[4] = {}) => {
    const container = await runRoleContainer(engine.docker, build.tag, role, await freePort(), { ...options, flags: [...flags, ...(options.flags ?? [])] });
    containers.push(container);
    return container;
  };
  const [directory, scheduler, orchestrator, agent] = await Promise.all([
    start('directory'),
    start('scheduler'),
    start('orchestrator'),
    start('agent', {
      flags: ['--network', 'host', '--machine-id', machineId, '--stop-grace', '1'],
      env: { DOCKER_HOST: 'unix:///var/run/docker.sock' },
      binds: [`${engine.socket}:/var/run/docker.sock`],
    }),
  ]);
  await Promise.all([directory!, scheduler!, orchestrator!, agent!].map((role) => waitAnswering(role, '/readyz', 60_000)));
  const machine = await waitFor(
    async () => {
      const machines = await http('GET', `${orchestrator!.url}/cluster/machines`);
      if (machines.status !== 200) throw new Error(`GET /cluster/machines answered ${machines.status}: ${JSON.stringify(machines.body)}`);
      return (machines.body as { id: string; docker: unknown }[]).find((m) => m.id === machineId);
    },
    // As long as the roles' own readiness may take: on two busy cores a role's store reads can answer 503 for a while.
    60_000,
    { what: "the agent container's machine" },
  );
  t.match(machine.docker, { reachable: true }, 'the agent reaches the engine through the mounted socket');

  const image = await buildTestImage(engine.docker, registry.host, `image-test/web-${randomBytes(2).toString('hex')}`, 'v1');
  const service = `img-${randomBytes(2).toString('hex')}`;
  const repository = image.reference.replace(/:v1$/, '');
  t.equal((await http('POST', `${directory!.url}/services`, { name: service, containerImage: repository, numInstances: 2 })).status, 201);
  t.equal((await http('PATCH', `${orchestrator!.url}/services/${service}/config/next`, { env: { GREETING: 'from-the-image' } })).status, 200);
  const deploy = await http('POST', `${scheduler!.url}/hooks/deploy`, { serviceName: service, containerRepository: image.reference, pushedAt: 0 });
  t.match(deploy, { status: 200, body: { release: 'v1', image: `${repository}@${image.digest}` } });

  const units = await waitFor(async () => {
    const listed = (await http('GET', `${orchestrator!.url}/services/${service}/units`)).body as { unit: string; sub: string; machine: string; address: string }[];
    return listed.length === 2 && listed.every((unit) => unit.sub === 'running') ? listed : undefined;
  }, 60_000, { what: `2 running units of ${service}` });
  t.same(units.map((unit) => unit.unit).sort(), [`${service}-1.service`, `${service}-2.service`]);
  t.ok(units.every((unit) => unit.machine === machineId), 'placed on the agent container\'s machine');
  for (const unit of units) {
    t.match(await fetch(`http://${unit.address}/`).then((response) => response.text()), new RegExp(`^${unit.unit} from-the-image v1`), `${unit.unit} answers`);
  }

  t.equal((await http('DELETE', `${orchestrator!.url}/services/${service}`)).status, 204);
  const left = await engine.docker.listContainers({ all: true, filters: { label: [`platform.service=${service}`] } });
  t.same(left, [], 'the agent container stopped and removed the units');
});
