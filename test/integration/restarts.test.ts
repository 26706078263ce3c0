import t, { type Test } from 'tap';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { request } from 'undici';
import { startDockerd } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { http, runPlatform, serveRole, waitHealthy, type PlatformProcess } from '../harness/platform.js';
import { startEtcd } from '../harness/etcd.js';
import { freePort } from '../harness/free-port.js';
import { holdDefaultPorts } from '../harness/default-ports.js';
import { waitFor } from '../harness/wait.js';
import { startLoad } from '../harness/http-load.js';
import { runsConfig } from '../../src/roles/gateway/haproxy-process.js';

// Issue 28 (restarts keep units): restarting `platform up` on the same data directory must adopt
// the running unit containers, not recreate, restart or move them, and must record no failed
// deployment. Real `platform up` processes, a real dockerd and registry.

const engine = await startDockerd();
const registry = await startRegistry();
const repository = `restarts/web-${randomBytes(3).toString('hex')}`;
const image = await buildTestImage(engine.docker, registry.host, repository, 'v1');
t.teardown(async () => {
  await registry.stop();
  await engine.stop();
});

const orchestrator = 'http://127.0.0.1:9000';
const scheduler = 'http://127.0.0.1:9002';
const gateway = 'http://127.0.0.1:8080';

interface Unit {
  unit: string;
  active: string;
  sub: string;
  address?: string;
}

/** Each unit container's id and start time: what a recreate or a restart changes. */
async function unitContainers(service?: string): Promise<Record<string, string>> {
  const listed = await engine.docker.listContainers({ all: true, filters: { label: [service ? `platform.service=${service}` : 'platform.service'] } });
  const inspected = await Promise.all(listed.map((c) => engine.docker.getContainer(c.Id).inspect()));
  return Object.fromEntries(inspected.map((c) => [c.Name.replace(/^\//, ''), `${c.Id} started ${c.State.StartedAt} running ${c.State.Running}`]));
}

async function portsAnswer(): Promise<boolean> {
  const answers = await Promise.all([9000, 9001, 9002, 9003, 8080].map((port) => fetch(`http://127.0.0.1:${port}/healthz`).then(() => true, () => false)));
  return answers.some(Boolean);
}

async function runningUnits(service: string, count: number, at = orchestrator): Promise<Unit[]> {
  let seen: unknown;
  return waitFor(async () => {
    const units = (await http('GET', `${at}/services/${service}/units`)).body as Unit[];
    seen = units;
    return units.length === count && units.every((u) => u.active === 'active' && u.sub === 'running') ? units : undefined;
  }, 60_000, { what: `${count} running units of ${service}` }).catch((error: Error) => {
    throw new Error(`${error.message}; last listed: ${JSON.stringify(seen)}`);
  });
}

/** `platform up` on a data directory of its own, with more flags; `start` runs it again on the same directory. */
function platformUp(flags: string[]): { dataDir: string; start(): Promise<PlatformProcess> } {
  const dataDir = mkdtempSync(join(tmpdir(), 'platform-restarts-'));
  const args = ['up', '--data-dir', dataDir, '--network', 'host', '--machine-id', `restarts-${randomBytes(2).toString('hex')}`, '--stop-grace', '2', ...flags];
  return {
    dataDir,
    start: async () => {
      const up = runPlatform(args, { DOCKER_HOST: engine.dockerHost });
      await Promise.all([9000, 9001, 9002, 9003, 8080].map((port) => waitHealthy(`http://127.0.0.1:${port}`, up)));
      return up;
    },
  };
}

/** `platform up` takes the default ports, which deploy-e2e.test takes too: one at a time. */
async function takeDefaultPorts(): Promise<() => Promise<void>> {
  const releaseDefaultPorts = await holdDefaultPorts();
  await waitFor(async () => !(await portsAnswer()), 60_000, { what: 'the default ports free of a platform up still stopping' });
  return releaseDefaultPorts;
}

/** Declares and deploys two load-balanced services of two units each, and waits until the gateway routes both. */
async function deployTwoServices(t: Test, up: PlatformProcess): Promise<string[]> {
  const services = ['alpha', 'beta'].map((name) => `${name}-${randomBytes(2).toString('hex')}`);
  for (const service of services) {
    const declaration = { name: service, description: 'restarts', containerImage: `${registry.host}/${repository}`, numInstances: 2, loadBalanced: true };
    const created = await http('POST', 'http://127.0.0.1:9001/services', declaration);
    t.equal(created.status, 201);
    const deploy = await http('POST', `${scheduler}/hooks/deploy`, { serviceName: service, containerRepository: image.reference, pushedAt: 0 });
    t.equal(deploy.status, 200, JSON.stringify(deploy.body));
  }
  await Promise.all(services.map((service) => runningUnits(service, 2)));
  for (const service of services) await throughGateway(service, up);
  return services;
}

/** Every deployment of each service succeeded, and there is only the first. */
async function onlyTheFirstDeployment(t: Test, services: string[]): Promise<void> {
  for (const service of services) {
    const deployments = (await http('GET', `${scheduler}/deployments?service=${service}`)).body as { state: string; trigger: string }[];
    t.same(deployments.filter((d) => d.state !== 'succeeded').map((d) => `${d.trigger} ${d.state}`), [], `${service}: no deployment but the first, succeeded`);
    t.equal(deployments.length, 1, `${service}: one deployment`);
  }
}

t.test('platform up restarted three times keeps its units: same containers, no failed deployment, serving throughout', async (t) => {
  const platform = platformUp([]);
  const releaseDefaultPorts = await takeDefaultPorts();
  let up = await platform.start();
  t.teardown(async () => {
    await up.stop();
    await releaseDefaultPorts();
  });

  const services = await deployTwoServices(t, up);
  const addresses = (await Promise.all(services.map((service) => runningUnits(service, 2)))).flat().map((u) => u.address!);
  const before = await unitContainers();
  t.equal(Object.keys(before).length, 4, 'four unit containers');

  // Every unit is asked directly, over and over, while the platform restarts: none may stop answering.
  let stopProbing = false;
  const failures: string[] = [];
  let probes = 0;
  const probing = (async () => {
    while (!stopProbing) {
      await Promise.all(
        addresses.map(async (address) => {
          const answered = await fetch(`http://${address}/`, { signal: AbortSignal.timeout(2000) }).then(
            (r) => (r.ok ? undefined : `HTTP ${r.status}`),
            (error: Error) => error.message,
          );
          if (answered) failures.push(`${new Date().toISOString()} ${address}: ${answered}`);
        }),
      );
      probes += 1;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  })();

  try {
    await restartThreeTimes();
  } finally {
    stopProbing = true;
    await probing;
  }
  t.ok(probes > 10, `the units were asked ${probes} times`);
  t.same(failures, [], 'every unit answered directly throughout');
  await onlyTheFirstDeployment(t, services);

  async function restartThreeTimes(): Promise<void> {
  for (let round = 1; round <= 3; round += 1) {
    await up.stop('SIGTERM');
    t.equal(up.child.exitCode, 0, `round ${round}: platform up exits 0 on SIGTERM`);
    up = await platform.start();
    for (const service of services) await runningUnits(service, 2);
    // Through the gateway as soon as it is back.
    for (const service of services) await throughGateway(service, up);
    // The restart grace has ended and the leader has healed since: a move would have begun.
    await settledAfterRestart();
    t.same(await unitContainers(), before, `round ${round}: the same containers, started once`);
  }
  }
});

t.test('platform up with the HAProxy data plane restarted three times under load: HAProxy outlives each restart and is adopted, no request fails', async (t) => {
  const platform = platformUp(['--data-plane', 'haproxy']);
  const releaseDefaultPorts = await takeDefaultPorts();
  let up: PlatformProcess | undefined;
  const pidFile = join(platform.dataDir, 'gateway-8080', 'haproxy.pid');
  const configFile = join(platform.dataDir, 'gateway-8080', 'haproxy.cfg');
  let master = 0;
  t.teardown(async () => {
    // SIGINT stops the platform for good, HAProxy with it; should that fail, it is stopped here.
    await up?.stop('SIGINT');
    if (master > 0 && runsConfig(master, configFile)) process.kill(master, 'SIGKILL');
    await releaseDefaultPorts();
  });
  up = await platform.start();
  master = Number(readFileSync(pidFile, 'utf8'));
  const services = await deployTwoServices(t, up);
  // This test's units only: the first test's stay running on the same engine.
  const containers = async () => Object.assign({}, ...(await Promise.all(services.map((service) => unitContainers(service))))) as Record<string, string>;
  const before = await containers();
  t.equal(Object.keys(before).length, 4, 'four unit containers');

  const load = startLoad({ url: 'http://127.0.0.1:8080/', host: `${services[0]}.platform.internal`, concurrency: 4, maxDurationMs: 10 * 60_000 });
  try {
    for (let round = 1; round <= 3; round += 1) {
      await waitFor(() => load.progress.ok > 0, 30_000, { what: 'requests answered through the gateway' });
      const stopping = Date.now();
      await up.stop('SIGTERM');
      t.comment(`round ${round}: platform up stopped in ${Date.now() - stopping} ms`);
      t.equal(up.child.exitCode, 0, `round ${round}: platform up exits 0 on SIGTERM`);
      if (up.child.exitCode !== 0) t.comment(up.output());
      t.ok(runsConfig(master, configFile), `round ${round}: HAProxy runs on without its gateway`);
      const answeredBefore = load.progress.ok;
      up = await platform.start();
      t.equal(Number(readFileSync(pidFile, 'utf8')), master, `round ${round}: the new gateway adopted the same HAProxy master`);
      // HAProxy forwards to the gateway's new Node server too (its own endpoints through the public port).
      await waitHealthy('http://127.0.0.1:8080', up);
      await waitFor(() => load.progress.ok > answeredBefore + 50, 30_000, { what: 'requests answered after the restart' });
      t.same(await containers(), before, `round ${round}: the same containers, started once`);
    }
  } finally {
    const result = await load.stop();
    t.comment(`load through HAProxy across three restarts: ${result.ok} answered, ${result.failed} failed in ${result.durationMs} ms`);
    t.equal(result.failed, 0, `no request failed: ${result.failures.join('; ')}`);
  }
  for (const service of services) await throughGateway(service, up);
  await settledAfterRestart();
  t.same(await containers(), before, 'the same containers, started once, after the renewal grace');
  await onlyTheFirstDeployment(t, services);
  await up.stop('SIGINT');
  t.notOk(runsConfig(master, configFile), 'platform up stopped with SIGINT (for good) stops HAProxy too');
});

async function throughGateway(service: string, up: PlatformProcess): Promise<void> {
  let last = '';
  await waitFor(async () => {
    // undici's request, not fetch: fetch does not send a Host header of the caller's.
    const response = await request(gateway, { headers: { host: `${service}.platform.internal` } });
    last = `${response.statusCode} ${await response.body.text()}`;
    return response.statusCode === 200;
  }, 30_000, { what: `${service} through the gateway` }).catch((error: Error) => {
    throw new Error(`${error.message}; last answer ${last}\n${up.output()}`);
  });
}

/**
 * Resolves once the new leader's renewal grace has ended and a heal pass has run after it: had the
 * restart made the machine look lost, that pass would have moved its units (a counted event, not a sleep).
 */
async function settledAfterRestart(): Promise<void> {
  await waitFor(async () => {
    const ready = (await http('GET', `${scheduler}/readyz`)).body as { leader?: boolean; renewalGraceUntil?: string; healedAt?: string };
    return ready.leader && ready.renewalGraceUntil && ready.healedAt && Date.parse(ready.healedAt) > Date.parse(ready.renewalGraceUntil);
  }, 90_000, { what: "a heal pass after the scheduler's renewal grace" });
}

t.test('an agent restarted with SIGTERM while the scheduler runs keeps its units: same containers, no deployment', async (t) => {
  const etcd = await startEtcd();
  // The default lease TTL: a restart keeps units when the agent is back within it, and a new Node process on two busy cores can take more than 3 s.
  const TTL_SECONDS = 10;
  const flags = ['--etcd', etcd.url, '--announce-ttl', String(TTL_SECONDS)];
  const agentArgs = [...flags, '--network', 'host', '--machine-id', `agent-restart-${randomBytes(2).toString('hex')}`, '--stop-grace', '2'];
  const agentPort = await freePort();
  const startAgent = () => serveRole('agent', agentPort, agentArgs, { DOCKER_HOST: engine.dockerHost });
  let agent = await startAgent();
  const roles = [await serveRole('directory', await freePort(), flags), await serveRole('scheduler', await freePort(), flags)];
  const orchestratorRole = await serveRole('orchestrator', await freePort(), flags);
  t.teardown(async () => {
    await Promise.all([agent, orchestratorRole, ...roles].map((role) => role.stop()));
    await etcd.stop();
  });
  const [, schedulerRole] = roles;
  const service = `solo-${randomBytes(2).toString('hex')}`;
  const declared = await http('POST', `${orchestratorRole.url}/services`, { name: service, description: 'restarts', containerRepository: `${registry.host}/${repository}`, numInstances: 2 });
  t.equal(declared.status, 201, JSON.stringify(declared.body));
  const deploy = await http('POST', `${schedulerRole!.url}/hooks/deploy`, { serviceName: service, containerRepository: image.reference, pushedAt: 0 });
  t.equal(deploy.status, 200, JSON.stringify(deploy.body));
  await runningUnits(service, 2, orchestratorRole.url);
  const before = await unitContainers(service);

  for (let round = 1; round <= 2; round += 1) {
    await agent.stop('SIGTERM');
    const stoppedAt = Date.now();
    agent = await startAgent();
    await runningUnits(service, 2, orchestratorRole.url);
    // Past the old lease's TTL, the scheduler has healed at least once: a lost machine would have been acted on.
    await waitFor(async () => {
      const ready = (await http('GET', `${schedulerRole!.url}/readyz`)).body as { healedAt?: string };
      return ready.healedAt && Date.parse(ready.healedAt) > stoppedAt + TTL_SECONDS * 1000 + 1_000;
    }, 45_000, { what: 'a heal pass after the old lease ran out' });
    t.same(await unitContainers(service), before, `round ${round}: the same containers, started once`);
  }
  const deployments = (await http('GET', `${schedulerRole!.url}/deployments?service=${service}`)).body as { trigger: string; state: string }[];
  t.same(deployments.map((d) => d.state), ['succeeded'], `no deployment but the first: ${deployments.map((d) => `${d.trigger} ${d.state}`).join(', ')}`);
});
