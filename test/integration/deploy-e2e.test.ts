import t, { type Test } from 'tap';
import { mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { startEtcd } from '../harness/etcd.js';
import { startDockerd } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { http, runPlatform, serveRole, waitHealthy } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';
import { holdDefaultPorts } from '../harness/default-ports.js';
import { generatedTypesPath, promtoolCheck, redoclyLint, typesOf } from '../harness/operator-tools.js';
import type { paths } from '../generated/orchestrator-api.js';

// The seed flow end to end on real parts: declare, set env, deploy, see three real containers
// answer HTTP with the env value, delete. Once with every role in its own process on etcd, once
// with `platform up` on the embedded store.

// Every test here uses the default ports, which restarts.test takes too.
const releaseDefaultPorts = await holdDefaultPorts();
t.teardown(releaseDefaultPorts);
const engine = await startDockerd();
const registry = await startRegistry();
const repository = `e2e/web-${randomBytes(3).toString('hex')}`;
const v1 = await buildTestImage(engine.docker, registry.host, repository, 'v1', { label: 'one' });
const v2 = await buildTestImage(engine.docker, registry.host, repository, 'v2', { label: 'two' });
t.teardown(async () => {
  await registry.stop();
  await engine.stop();
});

/** The scheduler's self-healing interval (HEAL_INTERVAL_MS in src/roles/scheduler/scheduler.ts). */
const HEAL_CHECK_MS = 10_000;

const dockerEnv = { DOCKER_HOST: engine.dockerHost };
const agentFlags = (machineId: string) => ['--network', 'host', '--machine-id', machineId, '--stop-grace', '2'];

interface Unit {
  unit: string;
  machine: string;
  active: string;
  sub: string;
  release: number;
  address?: string;
}

async function containersOf(service: string): Promise<string[]> {
  const containers = await engine.docker.listContainers({ all: true, filters: { label: [`platform.service=${service}`] } });
  return containers.map((c) => c.Names[0]!.replace(/^\//, '')).sort();
}

/** Waits until the orchestrator lists `count` units of `release`, all active/running, and returns them. */
async function runningUnits(orchestrator: string, service: string, count: number, release: number): Promise<Unit[]> {
  return waitFor(async () => {
    const units = (await http('GET', `${orchestrator}/services/${service}/units`)).body as Unit[];
    const ready = units.filter((u) => u.active === 'active' && u.sub === 'running' && u.release === release);
    return ready.length === count && units.length === count ? units : undefined;
  }, 60_000, { what: `${count} running units of ${service} v${release}` });
}

async function deployFlow(t: Test, urls: { directory: string; scheduler: string; orchestrator: string }) {
  const service = `web-${randomBytes(2).toString('hex')}`;
  const created = await http('POST', `${urls.directory}/services`, { name: service, description: 'e2e', containerImage: `${registry.host}/${repository}`, numInstances: 3 });
  t.equal(created.status, 201);
  t.equal((await http('PATCH', `${urls.orchestrator}/services/${service}/config/next`, { env: { GREETING: 'hello-e2e' } })).status, 200);

  const deploy = await http('POST', `${urls.scheduler}/hooks/deploy`, { serviceName: service, containerRepository: v1.reference, pushedAt: 0 });
  t.equal(deploy.status, 200, JSON.stringify(deploy.body));
  t.match(deploy.body, { statusCode: 200, release: 'v1', version: 1, image: `${registry.host}/${repository}@${v1.digest}` });

  const units = await runningUnits(urls.orchestrator, service, 3, 1);
  t.same(units.map((u) => u.unit).sort(), [1, 2, 3].map((i) => `${service}-${i}.service`));
  t.same(await containersOf(service), [1, 2, 3].map((i) => `${service}-${i}.service`));
  for (const unit of units) {
    const page = await fetch(`http://${unit.address}/`).then((r) => r.text());
    t.match(page, new RegExp(`^${unit.unit} hello-e2e v1`), `${unit.unit} answers with its name and the env value`);
  }
  const deployment = await waitFor(async () => {
    const record = (await http('GET', `${urls.scheduler}/deployments/${deploy.body.deployment}`)).body;
    return record.state === 'succeeded' ? record : undefined;
  }, 10_000);
  t.equal(deployment.units.length, 3);

  const redeploy = await http('POST', `${urls.orchestrator}/services/${service}/deploy`, { containerRepository: v2.reference });
  t.match(redeploy, { status: 200, body: { release: 'v2' } });
  for (const unit of await runningUnits(urls.orchestrator, service, 3, 2)) {
    t.match(await fetch(`http://${unit.address}/`).then((r) => r.text()), /hello-e2e v2/);
  }
  const history = await http('GET', `${urls.orchestrator}/services/${service}/config/history`);
  t.same(history.body.map((r: { version: number; digest: string }) => [r.version, r.digest]), [[1, v1.digest], [2, v2.digest]]);

  const deleted = await http('DELETE', `${urls.orchestrator}/services/${service}`);
  t.equal(deleted.status, 204);
  t.same(await containersOf(service), [], 'its containers are gone');
  t.equal((await http('GET', `${urls.orchestrator}/services/${service}`)).status, 404);
  // The scheduler's self-healing check (every 10 s) must not take the deleted service's last
  // succeeded deployment for a service that lost its units.
  await new Promise((resolve) => setTimeout(resolve, HEAL_CHECK_MS + 2_000));
  t.same(await containersOf(service), [], 'no unit of the deleted service comes back after a healing check');
  const cluster = (await http('GET', `${urls.orchestrator}/cluster/units`)).body as Unit[];
  t.same(cluster.filter((unit) => unit.unit.startsWith(`${service}-`)), [], 'nor is one assigned');
  const deployments = (await http('GET', `${urls.scheduler}/deployments?service=${service}`)).body as { state: string; trigger: string; release: number }[];
  t.match(deployments[0], { trigger: 'stop', state: 'succeeded', release: 2 }, 'the stop is the newest deployment record');
  t.match(deployments[1], { state: /^(succeeded|superseded)$/, release: 2 }, 'the one before it (v2, which the stop may have cut short) is kept');

  // Declared again under the same name, the same image deploys afresh, as a history of its own.
  t.equal((await http('POST', `${urls.directory}/services`, { name: service, containerImage: `${registry.host}/${repository}`, numInstances: 1 })).status, 201);
  const again = await http('POST', `${urls.scheduler}/hooks/deploy`, { serviceName: service, containerRepository: v2.reference, pushedAt: 0 });
  t.match(again.body, { outcome: 'created', release: 'v1' }, 'not "unchanged", and not v3: the deleted service\'s releases are not the new one\'s');
  await runningUnits(urls.orchestrator, service, 1, 1);
  t.equal((await http('DELETE', `${urls.orchestrator}/services/${service}`)).status, 204);
}

t.test('every role in its own process on etcd', async (t) => {
  const etcd = await startEtcd();
  const flags = ['--etcd', etcd.url, '--announce-ttl', '3'];
  const directory = await serveRole('directory', await freePort(), flags);
  const scheduler = await serveRole('scheduler', await freePort(), flags);
  const orchestrator = await serveRole('orchestrator', await freePort(), flags);
  const agent = await serveRole('agent', await freePort(), [...flags, ...agentFlags(`e2e-${randomBytes(2).toString('hex')}`)], dockerEnv);
  t.teardown(async () => {
    await Promise.all([directory, scheduler, orchestrator, agent].map((role) => role.stop()));
    await etcd.stop();
  });
  await deployFlow(t, { directory: directory.url, scheduler: scheduler.url, orchestrator: orchestrator.url });

  t.test('the deploy and undeclared-service errors say what is wrong', async (t) => {
    const unknown = await http('POST', `${scheduler.url}/hooks/deploy`, { serviceName: 'nope', containerRepository: v1.reference, pushedAt: 0 });
    t.match(unknown, { status: 404, body: { message: /nope is not declared/ } });
    await http('POST', `${directory.url}/services`, { name: 'other', containerImage: `${registry.host}/${repository}` });
    const wrongRepo = await http('POST', `${scheduler.url}/hooks/deploy`, { serviceName: 'other', containerRepository: `${registry.host}/elsewhere:v1`, pushedAt: 0 });
    t.match(wrongRepo, { status: 400, body: { message: /is not the repository of service other/ } });
    const missingTag = await http('POST', `${scheduler.url}/hooks/deploy`, { serviceName: 'other', containerRepository: `${registry.host}/${repository}:nope`, pushedAt: 0 });
    t.match(missingTag, { status: 400, body: { message: /does not exist in registry/ } });
    const badBody = await http('POST', `${scheduler.url}/hooks/deploy`, { serviceName: 'other', containerRepository: v1.reference, pushedAt: -1 });
    t.match(badBody, { status: 400, body: { message: /^pushedAt must/ } });
  });

  t.test('an agent whose Docker engine is unreachable says so, and a deploy to it fails with that reason', async (t) => {
    await agent.stop();
    const blind = await serveRole('agent', await freePort(), [...flags, ...agentFlags('blind')], { DOCKER_HOST: 'unix:///tmp/no-such-docker.sock' });
    t.teardown(() => blind.stop());
    const machine = await waitFor(async () => (await http('GET', `${orchestrator.url}/cluster/machines`)).body.find((m: { id: string }) => m.id === 'blind'), 10_000);
    t.match(machine.docker, { reachable: false, error: /no-such-docker\.sock/ });
    const deploy = await http('POST', `${scheduler.url}/hooks/deploy`, { serviceName: 'other', containerRepository: v1.reference, pushedAt: 0 });
    t.equal(deploy.status, 200);
    const failed = await waitFor(async () => {
      const record = (await http('GET', `${scheduler.url}/deployments/${deploy.body.deployment}`)).body;
      return record.state === 'failed' ? record : undefined;
    }, 15_000);
    t.match(failed.reason, /Docker engine unreachable/);
  });
});

/** The roles `platform up` runs, on their default ports. */
const upRoles = { orchestrator: 9000, directory: 9001, scheduler: 9002, agent: 9003, gateway: 8080, web: 9004 };

type Machines = paths['/cluster/machines']['get']['responses'][200]['content']['application/json'];

async function operatorToolsAccept(t: Test): Promise<void> {
  const seenOn = new Map<string, string>();
  for (const [role, port] of Object.entries(upRoles)) {
    const url = `http://127.0.0.1:${port}`;
    const lint = await redoclyLint(url);
    t.equal(lint.code, 0, `Redocly's recommended rules report no error on the ${role}'s document`);
    if (lint.code !== 0) t.comment(lint.output);
    const metrics = await promtoolCheck(url);
    t.equal(metrics.code, 0, `promtool check metrics passes on the ${role}'s /metrics`);
    if (metrics.code !== 0) t.comment(metrics.output);
    for (const line of metrics.text.split('\n').filter((line) => line && !line.startsWith('#'))) {
      const series = line.slice(0, line.lastIndexOf(' '));
      if (seenOn.has(series)) t.fail(`${series} is served by the ${seenOn.get(series)} and by the ${role}`);
      seenOn.set(series, role);
    }
    if (role === 'orchestrator') {
      const types = await typesOf(lint.document);
      const current = join(dirname(generatedTypesPath), '..', '..', 'dist', 'orchestrator-api.ts');
      if (types !== readFileSync(generatedTypesPath, 'utf8')) writeFileSync(current, types);
      t.equal(types, readFileSync(generatedTypesPath, 'utf8'), `the committed typed client is what openapi-typescript makes of the live document (else copy ${current} to ${generatedTypesPath})`);
    }
  }
  t.ok([...seenOn.keys()].some((series) => series.startsWith('process_cpu_user_seconds_total')), "the process's own series are served");
  t.ok([...seenOn.keys()].some((series) => series.startsWith('platform_http_requests_total{role="agent"')), 'and each role its own');
  // The typed client's types on a live answer: a field the API renames breaks this at compile time.
  const machines = (await http('GET', 'http://127.0.0.1:9000/cluster/machines')).body as Machines;
  t.equal(machines[0]?.docker.reachable, true, "the machine's engine, read through the generated types");
}

t.test('platform up: every role in one process on the embedded store', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'platform-up-'));
  const up = runPlatform(['up', '--data-dir', dataDir, ...agentFlags(`up-${randomBytes(2).toString('hex')}`)], dockerEnv);
  t.teardown(() => up.stop());
  await Promise.all([9000, 9001, 9002, 9003].map((port) => waitHealthy(`http://127.0.0.1:${port}`, up)));
  await waitFor(() => /orchestrator\s+http:\/\/127\.0\.0\.1:9000/.test(up.output()), 10_000, { what: 'the banner naming each API' });
  // The first start makes the first admin token: in a file only its owner reads, never printed.
  const tokenFile = join(dataDir, 'admin-token');
  await waitFor(() => up.output().includes(`first admin token written to ${tokenFile}`), 10_000, { what: 'the banner naming the token file' });
  t.equal(statSync(tokenFile).mode & 0o777, 0o600, 'the token file is 0600');
  const secret = readFileSync(tokenFile, 'utf8').trim();
  t.match(secret, /^plt_[A-Za-z0-9_-]{43}$/);
  t.notOk(up.output().includes(secret), 'the secret is not printed');
  t.notMatch(up.output(), /no Docker engine reachable/, 'with an engine, no warning about one');
  t.equal((await http('POST', 'http://127.0.0.1:9000/tokens/bootstrap')).status, 409, 'bootstrap works once');
  await waitFor(async () => (await http('GET', 'http://127.0.0.1:9000/cluster/machines')).body.length === 1, 10_000);
  await t.test("the tools operators use accept every role's OpenAPI document and metrics", (t) => operatorToolsAccept(t));
  await deployFlow(t, { directory: 'http://127.0.0.1:9001', scheduler: 'http://127.0.0.1:9002', orchestrator: 'http://127.0.0.1:9000' });
});

t.test('platform up with no Docker engine says so at start, and what to do', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'platform-up-'));
  const socket = join(dataDir, 'no-docker.sock');
  // As `npm start` runs it (the JSON log format: stdout is not a terminal here).
  const up = runPlatform(['up', '--data-dir', dataDir, ...agentFlags(`up-${randomBytes(2).toString('hex')}`)], { DOCKER_HOST: `unix://${socket}`, PLATFORM_LOG_LEVEL: 'info' });
  t.teardown(() => up.stop());
  await waitFor(() => /dashboard: /.test(up.output()), 20_000, { what: 'the banner' });
  t.match(up.output(), new RegExp(`warning: no Docker engine reachable at unix://${socket} \\(.*\\): units cannot start on this machine until one is\\. Start Docker`), 'the warning names the engine and what to do');
  t.match(up.output(), /^\{"level":30,"time":\d+,.*"role":"orchestrator".*"msg":"Server listening at http:\/\/127\.0\.0\.1:9000"\}$/m, 'log lines are JSON when stdout is not a terminal');
  const ready = await http('GET', 'http://127.0.0.1:9003/readyz');
  t.equal(ready.status, 503, "the agent's /readyz is not ready");
  t.match(ready.body.message, /no Docker engine reachable .* Start Docker/, 'and says the same');
});

t.test('--log-format pretty prints readable lines: time, level, role, message, fields', async (t) => {
  const role = await serveRole('directory', await freePort(), ['--data-dir', mkdtempSync(join(tmpdir(), 'pretty-')), '--log-format', 'pretty'], { PLATFORM_LOG_LEVEL: 'info' });
  await role.stop('SIGTERM');
  t.match(role.output(), /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: directory: Server listening at http:\/\/127\.0\.0\.1:\d+$/m);
  t.match(role.output(), /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: shutting down \{"signal":"SIGTERM"\}$/m);
  t.notMatch(role.output(), /"level":/, 'no JSON line');
});
