import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEtcd, type EtcdProcess } from './etcd.js';
import { startDockerd, type DockerEngine } from './docker.js';
import { startRegistry, type Registry } from './registry.js';
import { buildTestImage, type TestImage } from './test-image.js';
import { freePort } from './free-port.js';
import { http, serveRole, type PlatformProcess } from './platform.js';
import { waitFor } from './wait.js';

// What the gateway tests start: etcd, dockerd and a registry on loopback, the test image (tags
// v1 and v2), and the directory, scheduler, an agent (host networking) and one gateway per data
// plane (HAProxy and Node, or those PLATFORM_TEST_DATA_PLANES names), each its own `platform serve`
// process. Helpers declare and deploy services and wait for every gateway's routes, so a test runs
// the same requests against both data planes on the same units.

type Role = PlatformProcess & { url: string };

export type DataPlaneName = 'haproxy' | 'node';

/** One gateway under test. */
export interface Gateway extends PlatformProcess {
  plane: DataPlaneName;
  port: number;
  url: string;
  /** Its --data-dir (HAProxy's files are in `gateway-<port>/` under it). */
  dataDir: string;
}

/** The data planes the gateway tests run against: both unless PLATFORM_TEST_DATA_PLANES names some. */
export const testedDataPlanes = (): DataPlaneName[] => {
  const named = (process.env.PLATFORM_TEST_DATA_PLANES ?? '').split(',').map((name) => name.trim()).filter(Boolean);
  const planes = named.length > 0 ? named : ['haproxy', 'node'];
  for (const plane of planes) if (plane !== 'haproxy' && plane !== 'node') throw new Error(`PLATFORM_TEST_DATA_PLANES: unknown data plane ${plane}`);
  return planes as DataPlaneName[];
};

/** A gateway of one data plane; its HAProxy files go to a data directory of its own. */
export async function startGateway(plane: DataPlaneName, flags: string[], port?: number): Promise<Gateway> {
  const chosen = port ?? (await freePort());
  const dataDir = mkdtempSync(join(tmpdir(), 'platform-gateway-'));
  const role = await serveRole('gateway', chosen, [...flags, '--data-plane', plane, '--data-dir', dataDir]).catch((error: unknown) => {
    rmSync(dataDir, { recursive: true, force: true });
    throw error;
  });
  const stop = role.stop.bind(role);
  return Object.assign(role, {
    plane,
    port: chosen,
    dataDir,
    stop: async () => {
      await stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  });
}

/** The route table a gateway reports (GET /routes), checking it runs the data plane it was started with. */
export async function gatewayRoutes(gateway: Gateway): Promise<{ name: string; upstreams: { address: string; unit: string }[] }[]> {
  const body = (await http('GET', `${gateway.url}/routes`)).body as { dataPlane: string; routes: { name: string; upstreams: { address: string; unit: string }[] }[] };
  if (body.dataPlane !== gateway.plane) throw new Error(`the gateway on port ${gateway.port} runs the ${body.dataPlane} data plane, not ${gateway.plane}`);
  return body.routes;
}

export interface GatewayCluster {
  etcd: EtcdProcess;
  engine: DockerEngine;
  registry: Registry;
  images: { v1: TestImage; v2: TestImage };
  flags: string[];
  directory: Role;
  scheduler: Role;
  agent: Role;
  /** Stops the agent with SIGTERM, as systemd does; its units keep running. */
  stopAgent(): Promise<void>;
  /** Starts the (stopped) agent again on its machine id and port, with `flags` added (later flags win). */
  startAgent(flags?: string[]): Promise<Role>;
  /** One gateway per tested data plane. */
  gateways: Gateway[];
  /** Declares a service of the test image's repository. */
  declare(service: string, fields?: Record<string, unknown>): Promise<void>;
  /** Deploys an image tag through the scheduler's hook; returns the deployment id. */
  deploy(service: string, tag?: 'v1' | 'v2'): Promise<string>;
  /** Waits until the deployment has succeeded. */
  deployed(deployment: string, timeoutMs?: number): Promise<void>;
  /** Waits until every gateway routes `service` to `count` units and returns them. */
  routable(service: string, count: number, timeoutMs?: number): Promise<{ address: string; unit: string }[]>;
  stop(): Promise<void>;
}

export interface GatewayClusterOptions {
  /** The roles' --announce-ttl, the agent's lease included (default 3 s; an agent restart must come back within it). */
  announceTtlSeconds?: number;
  /** Give the engine Docker's default bridge, for units on bridge networking (default: none, host networking only). */
  bridge?: boolean;
}

export async function startGatewayCluster(agentFlags: string[] = [], options: GatewayClusterOptions = {}): Promise<GatewayCluster> {
  const [etcd, engine, registry] = await Promise.all([startEtcd(), startDockerd({ bridge: options.bridge ?? false }), startRegistry()]);
  const repository = `gw/web-${randomBytes(3).toString('hex')}`;
  const v1 = await buildTestImage(engine.docker, registry.host, repository, 'v1', { label: 'one' });
  const v2 = await buildTestImage(engine.docker, registry.host, repository, 'v2', { label: 'two' });
  const flags = ['--etcd', etcd.url, '--announce-ttl', String(options.announceTtlSeconds ?? 3)];
  // One at a time: on a busy machine, processes starting together each wait longer than their bound.
  const directory = await serveRole('directory', await freePort(), flags);
  const scheduler = await serveRole('scheduler', await freePort(), flags);
  const agentArgs = [...flags, '--network', 'host', '--machine-id', `gw-${randomBytes(2).toString('hex')}`, '--stop-grace', '2', ...agentFlags];
  const agentPort = await freePort();
  const startAgent = (more: string[] = []) => serveRole('agent', agentPort, [...agentArgs, ...more], { DOCKER_HOST: engine.dockerHost });
  let agent = await startAgent();
  const gateways: Gateway[] = [];
  for (const plane of testedDataPlanes()) gateways.push(await startGateway(plane, flags));

  return {
    etcd,
    engine,
    registry,
    images: { v1, v2 },
    flags,
    directory,
    scheduler,
    get agent() {
      return agent;
    },
    stopAgent: () => agent.stop('SIGTERM'),
    startAgent: async (more = []) => (agent = await startAgent(more)),
    gateways,
    declare: async (service, fields = {}) => {
      const created = await http('POST', `${directory.url}/services`, { name: service, containerImage: `${registry.host}/${repository}`, ...fields });
      if (created.status !== 201) throw new Error(`declaring ${service}: ${JSON.stringify(created.body)}`);
    },
    deploy: async (service, tag = 'v1') => {
      const reply = await http('POST', `${scheduler.url}/hooks/deploy`, { serviceName: service, containerRepository: (tag === 'v1' ? v1 : v2).reference, pushedAt: 0 });
      if (reply.status !== 200) throw new Error(`deploying ${service}: ${JSON.stringify(reply.body)}`);
      return reply.body.deployment as string;
    },
    deployed: async (deployment, timeoutMs = 60_000) => {
      await waitFor(async () => {
        const record = (await http('GET', `${scheduler.url}/deployments/${deployment}`)).body as { state: string; reason?: string };
        if (record.state === 'failed') throw new Error(`deployment ${deployment} failed: ${record.reason}`);
        return record.state === 'succeeded';
      }, timeoutMs, { what: `deployment ${deployment} to succeed` });
    },
    routable: (service, count, timeoutMs = 60_000) =>
      waitFor(async () => {
        let found: { address: string; unit: string }[] | undefined;
        for (const gateway of gateways) {
          const upstreams = (await gatewayRoutes(gateway)).find((route) => route.name === service)?.upstreams;
          if (upstreams?.length !== count) return undefined;
          found = upstreams;
        }
        return found;
      }, timeoutMs, { what: `${count} routable units of ${service} on every gateway` }),
    stop: async () => {
      await Promise.all([...gateways, agent, scheduler, directory].map((role) => role.stop()));
      await registry.stop();
      await engine.stop();
      await etcd.stop();
    },
  };
}
