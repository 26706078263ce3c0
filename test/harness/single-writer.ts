import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { buildTestImage, type TestImage } from './test-image.js';
import { http } from './platform.js';
import { waitFor } from './wait.js';
import { startLoad, type LoadResult } from './http-load.js';
import type { GatewayCluster } from './gateway-cluster.js';

// A single-writer service on the gateway test cluster, for the handover test and benchmark: units
// of the `locking` test image refuse to start while another unit holds /data/lock on their volume.
// Tags v1 and v2 serve (their pages end "one", "two"); `stuck` takes the lock and never serves.

export interface SingleWriterImages {
  repository: string;
  v1: TestImage;
  v2: TestImage;
  stuck: TestImage;
}

export async function buildSingleWriterImages(cluster: GatewayCluster): Promise<SingleWriterImages> {
  const repository = `gw/locking-${randomBytes(3).toString('hex')}`;
  const build = (tag: string, variant: 'locking' | 'locking-never-ready', label: string) =>
    buildTestImage(cluster.engine.docker, cluster.registry.host, repository, tag, { variant, label });
  return { repository, v1: await build('v1', 'locking', 'one'), v2: await build('v2', 'locking', 'two'), stuck: await build('stuck', 'locking-never-ready', 'stuck') };
}

/** Declares a one-unit service of the images with a volume on /data, and the rollout given (handover or the default). */
export async function declareSingleWriter(cluster: GatewayCluster, images: SingleWriterImages, service: string, rollout?: { strategy: 'handover'; handoverTimeout: number }): Promise<void> {
  await cluster.declare(service, { containerImage: `${cluster.registry.host}/${images.repository}`, numInstances: 1, volumes: [{ name: 'data', path: '/data' }] });
  if (rollout) {
    const patched = await http('PATCH', `${cluster.directory.url}/services/${service}/config`, { rollout });
    if (patched.status !== 200) throw new Error(`setting ${service}'s rollout: ${JSON.stringify(patched.body)}`);
  }
}

/** Deploys an image through the scheduler's hook; returns the deployment id. */
export async function deployImage(cluster: GatewayCluster, service: string, image: TestImage): Promise<string> {
  const reply = await http('POST', `${cluster.scheduler.url}/hooks/deploy`, { serviceName: service, containerRepository: image.reference, pushedAt: 0 });
  if (reply.status !== 200) throw new Error(`deploying ${service}: ${JSON.stringify(reply.body)}`);
  return reply.body.deployment as string;
}

/** Waits until the deployment has ended (succeeded, failed, reverted, superseded) and returns its record. */
export function deploymentEnd(cluster: GatewayCluster, deployment: string, timeoutMs = 120_000): Promise<{ state: string; reason?: string }> {
  return waitFor(async () => {
    const record = (await http('GET', `${cluster.scheduler.url}/deployments/${deployment}`)).body as { state: string; reason?: string };
    return ['succeeded', 'failed', 'reverted', 'superseded'].includes(record.state) ? record : undefined;
  }, timeoutMs, { what: `deployment ${deployment} to end` });
}

/** Declares the service, deploys `image` and waits until every gateway routes its one unit. */
export async function runSingleWriter(cluster: GatewayCluster, images: SingleWriterImages, service: string, image: TestImage, rollout?: { strategy: 'handover'; handoverTimeout: number }): Promise<void> {
  await declareSingleWriter(cluster, images, service, rollout);
  const first = await deploymentEnd(cluster, await deployImage(cluster, service, image));
  if (first.state !== 'succeeded') throw new Error(`the first deploy of ${service} ended ${first.state}: ${first.reason}`);
  await cluster.routable(service, 1);
}

export interface DeployUnderLoad {
  deployment: { state: string; reason?: string };
  /** From the deploy hook's call until the deployment ended. */
  deployMs: number;
  /** One per gateway, in the cluster's order. */
  results: LoadResult[];
}

/**
 * Runs `concurrency` request loops through every gateway while `image` is deployed, from a second
 * before the deploy until a second after it ended and the service has one routable unit again.
 */
export async function deployUnderLoad(cluster: GatewayCluster, service: string, image: TestImage, concurrency = 3): Promise<DeployUnderLoad> {
  const loads = cluster.gateways.map((gateway) =>
    startLoad({ url: `http://127.0.0.1:${gateway.port}/`, host: `${service}.platform.internal`, concurrency, maxDurationMs: 150_000, requestTimeoutMs: 90_000 }),
  );
  const stopLoads = () => Promise.all(loads.map((load) => load.stop()));
  try {
    await sleep(1_000);
    const started = Date.now();
    const deployment = await deploymentEnd(cluster, await deployImage(cluster, service, image));
    const deployMs = Date.now() - started;
    await cluster.routable(service, 1, 90_000);
    await sleep(1_000);
    return { deployment, deployMs, results: await stopLoads() };
  } catch (error) {
    // No client loop is left behind by a failing wait.
    await stopLoads();
    throw error;
  }
}

/** The release label a page ends with ("one", "two"). */
export const pageLabel = (body: string): string => body.split(' ').at(-1) ?? '';
