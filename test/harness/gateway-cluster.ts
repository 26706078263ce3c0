import { randomBytes } from 'node:crypto';
import { startEtcd, type EtcdProcess } from './etcd.js';
import { startDockerd, type DockerEngine } from './docker.js';
import { startRegistry, type Registry } from './registry.js';
import { buildTestImage, type TestImage } from './test-image.js';
import { freePort } from './free-port.js';
import { http, serveRole, type PlatformProcess } from './platform.js';
import { waitFor } from './wait.js';

// What the gateway tests start: etcd, dockerd and a registry on loopback, the test image (tags
// v1 and v2), and the directory, scheduler, an agent (host networking) and a gateway, each its own
// `platform serve` process. Helpers declare and deploy services and wait for the gateway's routes.

type Role = PlatformProcess & { url: string };

export interface GatewayCluster {
  etcd: EtcdProcess;
  engine: DockerEngine;
  registry: Registry;
  images: { v1: TestImage; v2: TestImage };
  flags: string[];
  directory: Role;
  scheduler: Role;
  agent: Role;
  gateway: Role;
  gatewayPort: number;
  /** Declares a service of the test image's repository. */
  declare(service: string, fields?: Record<string, unknown>): Promise<void>;
  /** Deploys an image tag through the scheduler's hook; returns the deployment id. */
  deploy(service: string, tag?: 'v1' | 'v2'): Promise<string>;
  /** Waits until the deployment has succeeded. */
  deployed(deployment: string, timeoutMs?: number): Promise<void>;
  /** Waits until the gateway routes `service` to `count` units and returns them. */
  routable(service: string, count: number, timeoutMs?: number): Promise<{ address: string; unit: string }[]>;
  stop(): Promise<void>;
}

export async function startGatewayCluster(agentFlags: string[] = []): Promise<GatewayCluster> {
  const [etcd, engine, registry] = await Promise.all([startEtcd(), startDockerd(), startRegistry()]);
  const repository = `gw/web-${randomBytes(3).toString('hex')}`;
  const v1 = await buildTestImage(engine.docker, registry.host, repository, 'v1', { label: 'one' });
  const v2 = await buildTestImage(engine.docker, registry.host, repository, 'v2', { label: 'two' });
  const flags = ['--etcd', etcd.url, '--announce-ttl', '3'];
  // One at a time: on a busy machine, processes starting together each wait longer than their bound.
  const directory = await serveRole('directory', await freePort(), flags);
  const scheduler = await serveRole('scheduler', await freePort(), flags);
  const agent = await serveRole('agent', await freePort(), [...flags, '--network', 'host', '--machine-id', `gw-${randomBytes(2).toString('hex')}`, '--stop-grace', '2', ...agentFlags], {
    DOCKER_HOST: engine.dockerHost,
  });
  const gatewayPort = await freePort();
  const gateway = await serveRole('gateway', gatewayPort, flags);

  return {
    etcd,
    engine,
    registry,
    images: { v1, v2 },
    flags,
    directory,
    scheduler,
    agent,
    gateway,
    gatewayPort,
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
        const routes = (await http('GET', `${gateway.url}/routes`)).body as { name: string; upstreams: { address: string; unit: string }[] }[];
        const upstreams = routes.find((route) => route.name === service)?.upstreams;
        return upstreams?.length === count ? upstreams : undefined;
      }, timeoutMs, { what: `${count} routable units of ${service}` }),
    stop: async () => {
      await Promise.all([gateway, agent, scheduler, directory].map((role) => role.stop()));
      await registry.stop();
      await engine.stop();
      await etcd.stop();
    },
  };
}
