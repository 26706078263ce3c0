import { randomBytes } from 'node:crypto';
import { buildTestImage } from '../test/harness/test-image.js';
import { http } from '../test/harness/platform.js';
import { waitFor } from '../test/harness/wait.js';
import { median, ms, printTable } from './table.js';
import { dockerApiStart, pullImage, startBenchPlatform } from './bench-platform.js';
import { watchCluster } from './cluster-events.js';
import { storeReads } from './role-metrics.js';

// A rolling update of 10 units from one image to another (both present on the engine) with
// maxSurge 10, against the floor of creating and starting 10 containers through the Docker API,
// with the scheduler's store reads per rollout; and a rollback issued while a broken rollout
// retries, against a plain rollout to the same image, in the same run.

const UNITS = 10;
const ROUNDS = 5;

const platform = await startBenchPlatform(['directory', 'scheduler', 'orchestrator', 'agent'], 'bench-rollout');
const { engine, registry } = platform;
const images = await Promise.all(['a', 'b'].map((tag) => buildTestImage(engine.docker, registry.host, 'bench/rollout', tag, { label: tag })));
const broken = await buildTestImage(engine.docker, registry.host, 'bench/rollout', 'broken', { variant: 'crash' });
await pullImage(engine, `${registry.host}/bench/rollout@${broken.digest}`);
for (const image of images) await pullImage(engine, `${registry.host}/bench/rollout@${image.digest}`);

const service = `roll-${randomBytes(2).toString('hex')}`;
await http('POST', `${platform.url('directory')}/services`, { name: service, containerImage: `${registry.host}/bench/rollout`, numInstances: UNITS });
await http('PATCH', `${platform.url('directory')}/services/${service}/config`, { maxSurge: UNITS, maxUnavailable: 0 });

/** The scheduler's store reads so far (requests, and keys they returned), from its /metrics. */
const schedulerStoreReads = () => storeReads(platform.url('scheduler'));

interface UnitRow {
  service: string;
  release: number;
  active: string;
  sub: string;
  restarts: number;
}
const units = async (): Promise<UnitRow[]> => (await http('GET', `${platform.url('orchestrator')}/services/${service}/units`)).body;

const watched = await watchCluster(platform.url('orchestrator'));

const deploy = (reference: string) => http('POST', `${platform.url('scheduler')}/hooks/deploy`, { serviceName: service, containerRepository: reference, pushedAt: 0 });

/**
 * Starts a deployment with `request` and times it: all units running its release (told by the
 * orchestrator's event stream, or with `polled`, the method until 2026-11-23, by GET units every
 * 10 ms), and its deployment succeeded.
 */
async function timed(request: () => Promise<{ status: number; body: any }>, polled = false): Promise<{ running: number; finished: number; reads: number; keys: number }> {
  const before = await schedulerStoreReads();
  const started = performance.now();
  const reply = await request();
  if (reply.status !== 200 || reply.body.outcome !== 'created') throw new Error(`deploy failed: ${JSON.stringify(reply.body)}`);
  const version = reply.body.version as number;
  const allRunning = (list: { service: string; release: number; active: string; sub: string }[]) =>
    list.filter((u) => u.service === service && u.release === version && u.active === 'active' && u.sub === 'running').length === UNITS;
  let running: number;
  if (polled) {
    await waitFor(async () => allRunning(await units()), 120_000, { intervalMs: 10 });
    running = performance.now() - started;
  } else {
    running = (await watched.until(({ units: all }) => allRunning(all))) - started;
  }
  const finished = (await watched.until(({ deployments }) => [...deployments.values()].some((d) => d.id === reply.body.deployment && d.state === 'succeeded'))) - started;
  const after = await schedulerStoreReads();
  return { running, finished, reads: after.requests - before.requests, keys: after.keys - before.keys };
}

const deployAndWait = (reference: string, polled = false) => timed(() => deploy(reference), polled);

/** Deploys the broken image and returns once one of its units is being restarted, its rollout still running. */
async function breakRollout(): Promise<void> {
  const reply = await deploy(broken.reference);
  const version = reply.body.version as number;
  await waitFor(async () => (await units()).some((u) => u.release === version && (u.sub === 'auto-restart' || u.restarts > 0)), 60_000, { intervalMs: 10 });
}

await deployAndWait(images[0]!.reference);
const rollouts: Awaited<ReturnType<typeof deployAndWait>>[] = [];
const floors: number[] = [];
const polledRollouts: number[] = [];
const bareFloors: number[] = [];
const floorImage = `${registry.host}/bench/rollout@${images[0]!.digest}`;
// Each round: the floor, a rollout, the floor with bare create options, a rollout timed by polling (back to the first image).
for (let round = 0; round < ROUNDS; round++) {
  floors.push(await dockerApiStart(engine, floorImage, UNITS));
  rollouts.push(await deployAndWait(images[1]!.reference));
  bareFloors.push(await dockerApiStart(engine, floorImage, UNITS, 'bare'));
  polledRollouts.push((await deployAndWait(images[0]!.reference, true)).running);
}
console.log(`rollout rounds (ms): running ${rollouts.map((r) => ms(r.running)).join(', ')}; floor ${floors.map(ms).join(', ')}; polled ${polledRollouts.map(ms).join(', ')}; bare floor ${bareFloors.map(ms).join(', ')}`);
// Rollback while a broken rollout retries, against a plain rollout v2 → v1, alternating.
const rollbacks: number[] = [];
const plain: number[] = [];
const first = images[0]!;
const firstVersion = ((await http('GET', `${platform.url('scheduler')}/services/${service}/releases`)).body as { version: number; digest: string }[]).find((r) => r.digest === first.digest)!.version;
// Each round starts and ends on the second image: break it, roll back to the first; then the plain rollout second → first.
await deployAndWait(images[1]!.reference);
for (let round = 0; round < ROUNDS; round++) {
  await breakRollout();
  rollbacks.push((await timed(() => http('POST', `${platform.url('scheduler')}/services/${service}/rollback`, { version: firstVersion }))).running);
  await deployAndWait(images[1]!.reference);
  plain.push((await deployAndWait(first.reference)).running);
  await deployAndWait(images[1]!.reference);
}
const running = median(rollouts.map((r) => r.running));
const finished = median(rollouts.map((r) => r.finished));
const floor = median(floors);
printTable([
  { benchmark: `rollout ${UNITS} units, maxSurge ${UNITS}: all new units running`, platform: ms(running), reference: `${ms(floor)} (Docker API create+start, the units' create options)`, ratio: `${(running / floor).toFixed(2)}x`, target: '<= 1.3x' },
  {
    benchmark: `rollout ${UNITS} units, as measured until 2026-11-23 (GET units every 10 ms; bare create options)`,
    platform: ms(median(polledRollouts)),
    reference: `${ms(median(bareFloors))} (Docker API create+start, bare options)`,
    ratio: `${(median(polledRollouts) / median(bareFloors)).toFixed(2)}x`,
    target: '-',
  },
  { benchmark: `rollout ${UNITS} units, maxSurge ${UNITS}: deployment succeeded (old units stopped)`, platform: ms(finished), reference: `${ms(floor)} (Docker API create+start, the units' create options)`, ratio: `${(finished / floor).toFixed(2)}x`, target: '-' },
  { benchmark: `rollout ${UNITS} units: scheduler store reads (keys returned), median`, platform: `${median(rollouts.map((r) => r.reads))} (${median(rollouts.map((r) => r.keys))} keys)`, reference: '99 (483 keys) before the watched snapshot', ratio: '-', target: '-' },
  { benchmark: `rollback while a broken rollout retries: all ${UNITS} units on v1`, platform: ms(median(rollbacks)), reference: `${ms(median(plain))} (plain rollout v2 → v1)`, ratio: `${(median(rollbacks) / median(plain)).toFixed(2)}x`, target: '<= 1.2x' },
]);
watched.close();
await platform.stop();
