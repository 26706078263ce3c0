import t from 'tap';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { startDockerd } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { http, runPlatform, waitHealthy } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';
import { holdDefaultPorts } from '../harness/default-ports.js';
import { freePort } from '../harness/free-port.js';

// `platform up` is the single-machine mode (issue 31): with no flag, a registry on this machine is
// allowed and an engine without a bridge network (this harness's dockerd, `--bridge=none`) runs
// units on host networking, and it says both at start. Before, the deploy was refused with 400
// (the loopback registry was not named with --allowed-registry) and, once allowed, hung 120 s
// "waiting for Docker to publish the unit port".

const releaseDefaultPorts = await holdDefaultPorts();
t.teardown(releaseDefaultPorts);
const engine = await startDockerd();
const registry = await startRegistry();
const repository = `up/hello-${randomBytes(3).toString('hex')}`;
const image = await buildTestImage(engine.docker, registry.host, repository, 'v1');
t.teardown(async () => {
  await registry.stop();
  await engine.stop();
});

const dataDir = mkdtempSync(join(tmpdir(), 'platform-up-'));
// No --network and no allowed registry: what an operator running `npm start` gives.
const up = runPlatform(['up', '--data-dir', dataDir, '--machine-id', `up-${randomBytes(2).toString('hex')}`, '--stop-grace', '1'], {
  DOCKER_HOST: engine.dockerHost,
  PLATFORM_ALLOWED_REGISTRIES: '',
});
t.teardown(() => up.stop());
await Promise.all([9000, 9001, 9002, 9003].map((port) => waitHealthy(`http://127.0.0.1:${port}`, up)));
await waitFor(() => /dashboard: /.test(up.output()), 20_000, { what: 'the end of the banner' });

t.test('it says at start that registries on this machine are allowed and that units use host networking', async (t) => {
  t.match(up.output(), /^registries on this machine \(127\.0\.0\.1, localhost, ::1\) are allowed without --allowed-registry$/m);
  t.match(up.output(), /^the Docker engine at unix:\/\/\S+ has no bridge network: units use host networking \(--network host\)$/m);
});

t.test('a service on a registry on this machine deploys and its unit answers on host networking', async (t) => {
  const service = 'hello';
  t.equal((await http('POST', 'http://127.0.0.1:9001/services', { name: service, containerImage: `${registry.host}/${repository}`, numInstances: 1 })).status, 201);
  const deploy = await http('POST', 'http://127.0.0.1:9002/hooks/deploy', { serviceName: service, containerRepository: image.reference, pushedAt: 0 });
  t.equal(deploy.status, 200, `the registry on 127.0.0.1 is not refused: ${JSON.stringify(deploy.body)}`);
  if (deploy.status !== 200) return;
  const deployment = await waitFor(async () => {
    const record = (await http('GET', `http://127.0.0.1:9002/deployments/${deploy.body.deployment}`)).body;
    return ['succeeded', 'failed', 'reverted', 'superseded'].includes(record.state) ? record : undefined;
  }, 150_000, { what: 'the deployment to end' });
  t.equal(deployment.state, 'succeeded', `the deployment succeeds: ${deployment.reason ?? ''}`);
  const [unit] = (await http('GET', `http://127.0.0.1:9000/services/${service}/units`)).body as { address: string }[];
  t.match(await fetch(`http://${unit!.address}/`).then((response) => response.text()), /^hello-1\.service /);
  const [container] = await engine.docker.listContainers({ filters: { label: [`platform.service=${service}`] } });
  t.equal(container?.HostConfig.NetworkMode, 'host');
  t.equal((await http('DELETE', `http://127.0.0.1:9000/services/${service}`)).status, 204);
});

t.test('a second platform up on ports in use says which role cannot listen and the flag that moves it; with --ports it starts beside the first', async (t) => {
  const second = (ports: string[]) =>
    runPlatform(['up', '--data-dir', mkdtempSync(join(tmpdir(), 'platform-up-second-')), '--machine-id', `up-${randomBytes(2).toString('hex')}`, ...ports], { DOCKER_HOST: engine.dockerHost });
  const refused = second([]);
  const code = await new Promise<number | null>((resolve) => refused.child.once('exit', (exitCode) => resolve(exitCode)));
  t.equal(code, 2, 'exit 2, as for a bad flag');
  t.match(refused.output(), /the directory cannot listen on 127\.0\.0\.1:9001: another process listens there \(another platform\?\)\. Stop it, or move the directory with --ports directory=<port>/);

  const [directory, scheduler, orchestrator, agent, gateway, web, internal, https] = await Promise.all(Array.from({ length: 8 }, () => freePort()));
  const moved = second([
    '--ports', `directory=${directory},scheduler=${scheduler},orchestrator=${orchestrator},agent=${agent},gateway=${gateway},web=${web}`,
    '--internal-port', String(internal), '--https-port', String(https),
  ]);
  t.teardown(() => moved.stop());
  await Promise.all([directory, scheduler, orchestrator, agent, web].map((port) => waitHealthy(`http://127.0.0.1:${port}`, moved)));
  await waitFor(() => /dashboard: /.test(moved.output()), 20_000, { what: 'the end of the second banner' });
  t.match(moved.output(), new RegExp(`orchestrator +http://127\\.0\\.0\\.1:${orchestrator} `), 'the banner shows the moved ports');
});
