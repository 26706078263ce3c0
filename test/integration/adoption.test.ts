import t from 'tap';
import { randomBytes } from 'node:crypto';
import type Docker from 'dockerode';
import { request } from 'undici';
import { gatewayRoutes, startGatewayCluster } from '../harness/gateway-cluster.js';
import { PLATFORM_PORTS } from '../../src/schemas/service.js';
import { startLoad, type LoadResult } from '../harness/http-load.js';
import { http } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';

// Issue 28 (restarts keep units): a restarted agent adopts the containers that serve its assigned
// slots on its network mode, whatever else created them (other unit defaults, an older platform
// version, the old volume names), and replaces those on the other network mode one at a time, each
// replacement ready before its old container stops. Real etcd, dockerd, registry, roles and gateways.

// An agent restart must come back within the lease TTL (or its machine is lost and its units move,
// which is not what this tests): a new agent process took 16 s, once 36 s, on two cores at load 30.
const TTL_SECONDS = 60;
const cluster = await startGatewayCluster([], { announceTtlSeconds: TTL_SECONDS, bridge: true });
const { engine, gateways, declare, deploy, deployed, routable, scheduler } = cluster;
t.teardown(() => cluster.stop());
const docker = engine.docker;

interface Seen {
  id: string;
  unit: string;
  network: string;
  address: string | undefined;
}

/** The running unit containers of `service`, with the address each is reached at on this machine. */
async function runningContainers(service: string): Promise<Seen[]> {
  const listed = await docker.listContainers({ filters: { label: [`platform.service=${service}`] } });
  return listed.map((c) => {
    const port = Number(c.Labels['platform.port']);
    const network = c.HostConfig.NetworkMode === 'host' ? 'host' : 'bridge';
    const published = c.Ports.find((p) => p.PrivatePort === port && p.PublicPort)?.PublicPort;
    const hostPort = network === 'host' ? port : published;
    return { id: c.Id, unit: c.Labels['platform.unit']!, network, address: hostPort ? `127.0.0.1:${hostPort}` : undefined };
  });
}

/** Each unit container's id and start time: what a recreate or a restart changes. */
async function started(service: string): Promise<Record<string, string>> {
  const listed = await docker.listContainers({ all: true, filters: { label: [`platform.service=${service}`] } });
  const inspected = await Promise.all(listed.map((c) => docker.getContainer(c.Id).inspect()));
  return Object.fromEntries(inspected.map((c) => [c.Config.Labels['platform.unit']!, `${c.Id} started ${c.State.StartedAt} running ${c.State.Running}`]));
}

const answers = (address: string): Promise<boolean> =>
  fetch(`http://${address}/`, { signal: AbortSignal.timeout(2_000) }).then((response) => response.ok, () => false);

/** Past the stopped agent's lease, the scheduler has healed at least once: a lost machine would have been acted on. */
async function healedAfterLease(stoppedAt: number): Promise<void> {
  await waitFor(async () => {
    const ready = (await http('GET', `${scheduler.url}/readyz`)).body as { healedAt?: string };
    return ready.healedAt && Date.parse(ready.healedAt) > stoppedAt + TTL_SECONDS * 1000 + 1_000;
  }, TTL_SECONDS * 1000 + 90_000, { what: 'a heal pass after the old lease ran out' });
}

/** The service's deployments, oldest first: the state of each, and why a failed one failed. */
async function deploymentStates(service: string): Promise<string[]> {
  const deployments = (await http('GET', `${scheduler.url}/deployments?service=${service}`)).body as { state: string; trigger: string; reason?: string }[];
  return deployments.reverse().map((d) => (d.state === 'succeeded' ? d.state : `${d.trigger} ${d.state}: ${d.reason}`));
}

/** Restarts the agent, saying how long it was away (a restart must end within the lease TTL). */
async function restartAgent(t: { comment(message: string): void }, flags: string[]): Promise<void> {
  const stopping = Date.now();
  await cluster.stopAgent();
  const starting = Date.now();
  await cluster.startAgent(flags);
  t.comment(`agent stopped in ${starting - stopping} ms, started in ${Date.now() - starting} ms`);
}

/** Declares and deploys a service of `instances` units (its GREETING the prefix) and waits until every gateway routes them. */
async function deployedService(prefix: string, instances: number, fields: Record<string, unknown> = {}): Promise<string> {
  const service = `${prefix}-${randomBytes(2).toString('hex')}`;
  await declare(service, { numInstances: instances, env: { GREETING: prefix }, ...fields });
  await deployed(await deploy(service, 'v1'));
  await routable(service, instances);
  return service;
}

t.test('an agent restarted with another --network replaces its units one at a time, each ready before its old container stops, failing no request', async (t) => {
  const instances = 3;
  const service = await deployedService('net', instances);
  const before = await runningContainers(service);
  t.same([...new Set(before.map((c) => c.network))], ['host'], 'the units run on host networking first');
  const oldIds = new Set(before.map((c) => c.id));

  // What the machine runs, sampled: when each replacement first answered, when each old container was gone.
  const replacementReadyAt = new Map<string, number>();
  const oldGoneAt = new Map<string, number>();
  let mostRunning = 0;
  let sampling = true;
  const sampler = (async () => {
    // One more sample after sampling is turned off: the one in flight then may predate the last old container going.
    for (let finalSample = false; !finalSample; ) {
      finalSample = !sampling;
      const now = Date.now();
      const running = await runningContainers(service).catch(() => undefined);
      if (running) {
        mostRunning = Math.max(mostRunning, running.length);
        for (const old of before) if (!oldGoneAt.has(old.unit) && !running.some((c) => c.id === old.id)) oldGoneAt.set(old.unit, now);
        const fresh = running.filter((c) => !oldIds.has(c.id) && !replacementReadyAt.has(c.unit) && c.address);
        const ready = await Promise.all(fresh.map((c) => answers(c.address!)));
        fresh.forEach((c, i) => ready[i] && replacementReadyAt.set(c.unit, now));
      }
      if (!finalSample) await new Promise((resolve) => setTimeout(resolve, 100));
    }
  })();
  const loads = gateways.map((gateway) => startLoad({ url: `http://127.0.0.1:${gateway.port}/`, host: `${service}.platform.internal`, concurrency: 4, maxDurationMs: 180_000 }));
  let loadsStopped: Promise<LoadResult[]> | undefined;
  const stopLoads = () => (loadsStopped ??= Promise.all(loads.map((load) => load.stop())));
  t.teardown(async () => {
    sampling = false;
    await sampler;
    await stopLoads();
  });

  await restartAgent(t, ['--network', 'bridge']);
  let last: Seen[] = [];
  await waitFor(async () => {
    last = await runningContainers(service);
    return last.length === instances && last.every((c) => c.network === 'bridge' && !oldIds.has(c.id));
  }, 150_000, { what: `${instances} bridge containers replacing the host ones` }).catch((error: Error) => {
    throw new Error(`${error.message}; running: ${JSON.stringify(last)}; agent: ${cluster.agent.output()}`);
  });
  const routes = await routable(service, instances);
  t.same(routes.map((r) => r.address).sort(), last.map((c) => c.address).sort(), 'the gateways route to the replacements');
  // Each replacement started under a longer name (its old container held the unit's) and gets the unit's name back.
  await waitFor(async () => {
    const listed = await docker.listContainers({ filters: { label: [`platform.service=${service}`] } });
    return listed.every((c) => c.Names[0] === `/${c.Labels['platform.unit']}`);
  }, 60_000, { what: 'the replacements named after their units' });
  sampling = false;
  await sampler;
  const results = await stopLoads();

  for (const [i, result] of results.entries()) {
    const summary = `${gateways[i]!.plane}: ${result.ok} ok, ${result.failed} failed in ${result.durationMs} ms${result.failures.length ? `: ${result.failures.join('; ')}` : ''}`;
    t.comment(`network change, ${summary}`);
    t.equal(result.failed, 0, summary);
  }
  for (const { unit } of before) {
    const ready = replacementReadyAt.get(unit);
    const gone = oldGoneAt.get(unit);
    t.ok(ready !== undefined && gone !== undefined && ready < gone, `${unit}: the replacement answered (${ready}) before the old container stopped (${gone})`);
  }
  t.ok(mostRunning <= instances + 1, `one unit at a time: at most ${instances + 1} containers ran at once (${mostRunning})`);
  t.same(await deploymentStates(service), ['succeeded'], 'no deployment but the first');
});

t.test('an agent restarted with other unit defaults adopts every container: same ids and start times', async (t) => {
  const service = await deployedService('same', 2);
  const before = await started(service);
  const stoppedAt = Date.now();
  // Still bridge (the test before), with every unit default changed: they apply to new containers only.
  await restartAgent(t, ['--network', 'bridge', '--default-memory-limit', '256', '--host-network-user', '1000:1000', '--log-max-size', '5m', '--log-max-files', '2']);
  await healedAfterLease(stoppedAt);
  await routable(service, 2);
  t.same(await started(service), before, 'the same containers, started once');
  t.same(await deploymentStates(service), ['succeeded'], 'no deployment but the first');
});

/**
 * What the agent of 7d144ed (before issue 28's work) created for a unit, rebuilt from the unit's
 * container today: the same labels, no `User`, no default memory limit, and its volumes under the
 * old name `<service>-<instance>-<name>`, labelled without `platform.volume`.
 */
function createdBy7d144ed(today: Docker.ContainerInspectInfo, extraLabels: Record<string, string>): Docker.ContainerCreateOptions {
  const unitLabels = today.Config.Labels;
  const [service, instance, machine] = [unitLabels['platform.service']!, unitLabels['platform.instance']!, unitLabels['platform.machine']!];
  const port = `${unitLabels['platform.port']}/tcp`;
  const host = today.HostConfig;
  return {
    name: unitLabels['platform.unit'],
    Image: today.Config.Image,
    Env: today.Config.Env,
    Labels: { ...unitLabels, ...extraLabels },
    ExposedPorts: { [port]: {} },
    HostConfig: {
      Privileged: false,
      SecurityOpt: ['no-new-privileges'],
      CapDrop: ['ALL'],
      CapAdd: host.CapAdd,
      IpcMode: 'private',
      PidsLimit: 1024,
      LogConfig: host.LogConfig,
      Mounts: (today.Mounts ?? []).map((mount) => ({
        Type: 'volume' as const,
        Source: `${service}-${instance}-${mount.Name!.split('.').at(-1)}`,
        Target: mount.Destination,
        VolumeOptions: { NoCopy: false, DriverConfig: { Name: 'local', Options: {} }, Labels: { 'platform.managed': 'true', 'platform.machine': machine, 'platform.service': service, 'platform.instance': instance } },
      })),
      NetworkMode: 'bridge',
      PortBindings: { [port]: [{ HostIp: '', HostPort: '' }] },
    },
  };
}

t.test("containers made by 7d144ed's agent (old volume names) or labelled with an older platform version are adopted, not recreated", async (t) => {
  const service = await deployedService('old', 2, { volumes: [{ name: 'data', path: '/data' }] });

  await cluster.stopAgent();
  const stoppedAt = Date.now();
  const listed = await docker.listContainers({ filters: { label: [`platform.service=${service}`] } });
  t.equal(listed.length, 2);
  for (const entry of listed) {
    const today = await docker.getContainer(entry.Id).inspect();
    const instance = today.Config.Labels['platform.instance'];
    await docker.getContainer(entry.Id).remove({ force: true });
    for (const mount of today.Mounts ?? []) await docker.getVolume(mount.Name!).remove();
    // Instance 2 as a later platform version might have stamped it, with its version in a label.
    const old = await docker.createContainer(createdBy7d144ed(today, instance === '2' ? { 'platform.version': '0.0.1' } : {}));
    await old.start();
  }
  const remade = await started(service);
  const volumes = async () => (await docker.listContainers({ filters: { label: [`platform.service=${service}`] } })).flatMap((c) => c.Mounts.map((m) => m.Name)).sort();
  t.same(await volumes(), [`${service}-1-data`, `${service}-2-data`], 'the old containers mount the old-named volumes');

  await cluster.startAgent(['--network', 'bridge']);
  await healedAfterLease(stoppedAt);
  await routable(service, 2);
  t.same(await started(service), remade, 'the same containers, started once');
  t.same(await volumes(), [`${service}-1-data`, `${service}-2-data`], 'still on the old-named volumes');
  t.same(await deploymentStates(service), ['succeeded'], 'no deployment but the first');
});

// Issue 31 item 3, as an outside tester met it: an agent restarted with `--network host` over
// bridge containers, whose `PORT` label is the bridge default 8080 (the gateway's own port). The
// units move to host networking through the rolling step, and at no moment does a status or a
// gateway name an address where the platform listens: no gateway ever routes to itself.
t.test('an agent restarted from bridge to host networking replaces its bridge units, and no gateway ever routes a unit to a platform port or to itself', async (t) => {
  const service = await deployedService('tohost', 2);
  const before = await runningContainers(service);
  t.same([...new Set(before.map((c) => c.network))], ['bridge'], 'the units run on bridge networking first');
  const labelPorts = (await docker.listContainers({ filters: { label: [`platform.service=${service}`] } })).map((c) => c.Labels['platform.port']);
  t.same(labelPorts, ['8080', '8080'], "their PORT is the bridge default 8080, a gateway's port");

  const forbidden = new Set([...PLATFORM_PORTS, ...gateways.map((gateway) => gateway.port)]);
  const routedThere: string[] = [];
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      for (const gateway of gateways) {
        const routes = await gatewayRoutes(gateway).catch(() => []);
        for (const upstream of routes.find((route) => route.name === service)?.upstreams ?? []) {
          if (forbidden.has(Number(upstream.address.split(':').at(-1)))) routedThere.push(`${gateway.plane}: ${upstream.unit}@${upstream.address}`);
        }
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  })();
  t.teardown(async () => {
    sampling = false;
    await sampler;
  });

  await restartAgent(t, ['--network', 'host']);
  let last: Seen[] = [];
  await waitFor(async () => {
    last = await runningContainers(service);
    return last.length === 2 && last.every((c) => c.network === 'host');
  }, 150_000, { what: '2 host containers replacing the bridge ones' }).catch((error: Error) => {
    throw new Error(`${error.message}; running: ${JSON.stringify(last)}; agent: ${cluster.agent.output()}`);
  });
  const routes = await routable(service, 2);
  t.same(routes.map((r) => r.address).sort(), last.map((c) => c.address).sort(), 'the gateways route to the host-network replacements');
  sampling = false;
  await sampler;
  t.same(routedThere, [], 'no gateway routed the service to a platform port at any moment');
  for (const gateway of gateways) {
    const reply = await request(`http://127.0.0.1:${gateway.port}/`, { headers: { host: `${service}.platform.internal` }, headersTimeout: 5_000, bodyTimeout: 5_000 });
    t.match(await reply.body.text(), /tohost/, `${gateway.plane}: the service answers through the gateway`);
  }
  t.same(await deploymentStates(service), ['succeeded'], 'no deployment but the first');
});
