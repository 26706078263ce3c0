import { randomBytes } from 'node:crypto';
import { buildTestImage } from '../test/harness/test-image.js';
import { http } from '../test/harness/platform.js';
import { waitFor } from '../test/harness/wait.js';
import { median, ms, printTable } from './table.js';
import { dockerApiStart, pullImage, startBenchPlatform } from './bench-platform.js';

// A rolling update of 10 units from one image to another (both present on the engine) with
// maxSurge 10, against the floor of creating and starting 10 containers through the Docker API,
// with the scheduler's store reads per rollout; and a rollback issued while a broken rollout
// retries, against a plain rollout to the same image, in the same run.

const UNITS = 10;
const ROUNDS = 3;

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
async function schedulerStoreReads(): Promise<{ requests: number; keys: number }> {
  const text = await (await fetch(`${platform.url('scheduler')}/metrics`)).text();
  const sum = (name: string) => [...text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.e+]+)$`, 'gm'))].reduce((total, match) => total + Number(match[1]), 0);
  return { requests: sum('platform_store_reads_total'), keys: sum('platform_store_keys_read_total') };
}

interface UnitRow {
  release: number;
  active: string;
  sub: string;
  restarts: number;
}
const units = async (): Promise<UnitRow[]> => (await http('GET', `${platform.url('orchestrator')}/services/${service}/units`)).body;

const deploy = (reference: string) => http('POST', `${platform.url('scheduler')}/hooks/deploy`, { serviceName: service, containerRepository: reference, pushedAt: 0 });

/** Starts a deployment with `request` and times it: all units running its release, and its deployment succeeded. */
async function timed(request: () => Promise<{ status: number; body: any }>): Promise<{ running: number; finished: number; reads: number; keys: number }> {
  const before = await schedulerStoreReads();
  const started = performance.now();
  const reply = await request();
  if (reply.status !== 200 || reply.body.outcome !== 'created') throw new Error(`deploy failed: ${JSON.stringify(reply.body)}`);
  const version = reply.body.version as number;
  await waitFor(async () => (await units()).filter((u) => u.release === version && u.active === 'active' && u.sub === 'running').length === UNITS, 120_000, { intervalMs: 10 });
  const running = performance.now() - started;
  await waitFor(async () => (await http('GET', `${platform.url('scheduler')}/deployments/${reply.body.deployment}`)).body.state === 'succeeded', 120_000, { intervalMs: 10 });
  const finished = performance.now() - started;
  const after = await schedulerStoreReads();
  return { running, finished, reads: after.requests - before.requests, keys: after.keys - before.keys };
}

const deployAndWait = (reference: string) => timed(() => deploy(reference));

/** Deploys the broken image and returns once one of its units is being restarted, its rollout still running. */
async function breakRollout(): Promise<void> {
  const reply = await deploy(broken.reference);
  const version = reply.body.version as number;
  await waitFor(async () => (await units()).some((u) => u.release === version && (u.sub === 'auto-restart' || u.restarts > 0)), 60_000, { intervalMs: 10 });
}

await deployAndWait(images[0]!.reference);
const rollouts: Awaited<ReturnType<typeof deployAndWait>>[] = [];
const floors: number[] = [];
for (let round = 0; round < ROUNDS; round++) {
  floors.push(await dockerApiStart(engine, `${registry.host}/bench/rollout@${images[0]!.digest}`, UNITS));
  rollouts.push(await deployAndWait(images[(round + 1) % 2]!.reference));
}
// Rollback while a broken rollout retries, against a plain rollout v2 → v1, alternating.
const rollbacks: number[] = [];
const plain: number[] = [];
const first = images[0]!;
const firstVersion = ((await http('GET', `${platform.url('scheduler')}/services/${service}/releases`)).body as { version: number; digest: string }[]).find((r) => r.digest === first.digest)!.version;
// Each round starts and ends on the second image: break it, roll back to the first; then the plain rollout second → first.
if (ROUNDS % 2 === 0) await deployAndWait(images[1]!.reference);
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
  { benchmark: `rollout ${UNITS} units, maxSurge ${UNITS}: all new units running`, platform: ms(running), reference: `${ms(floor)} (Docker API create+start)`, ratio: `${(running / floor).toFixed(2)}x`, target: '<= 1.3x' },
  { benchmark: `rollout ${UNITS} units, maxSurge ${UNITS}: deployment succeeded (old units stopped)`, platform: ms(finished), reference: `${ms(floor)} (Docker API create+start)`, ratio: `${(finished / floor).toFixed(2)}x`, target: '-' },
  { benchmark: `rollout ${UNITS} units: scheduler store reads (keys returned), median`, platform: `${median(rollouts.map((r) => r.reads))} (${median(rollouts.map((r) => r.keys))} keys)`, reference: '99 (483 keys) before the watched snapshot', ratio: '-', target: '-' },
  { benchmark: `rollback while a broken rollout retries: all ${UNITS} units on v1`, platform: ms(median(rollbacks)), reference: `${ms(median(plain))} (plain rollout v2 → v1)`, ratio: `${(median(rollbacks) / median(plain)).toFixed(2)}x`, target: '<= 1.2x' },
]);
await platform.stop();
