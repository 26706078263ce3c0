import { randomBytes } from 'node:crypto';
import { buildTestImage } from '../test/harness/test-image.js';
import { http } from '../test/harness/platform.js';
import { waitFor } from '../test/harness/wait.js';
import { median, ms, printTable } from './table.js';
import { dockerApiStart, pullImage, startBenchPlatform } from './bench-platform.js';

// Issue 3's benchmark: a rolling update of 10 units from one image to another (both present on
// the engine) with maxSurge 10, against the floor of creating and starting 10 containers through
// the Docker API, in the same run.

const UNITS = 10;
const ROUNDS = 3;

const platform = await startBenchPlatform(['directory', 'scheduler', 'orchestrator', 'agent'], 'bench-rollout');
const { engine, registry } = platform;
const images = await Promise.all(['a', 'b'].map((tag) => buildTestImage(engine.docker, registry.host, 'bench/rollout', tag, { label: tag })));
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

async function deployAndWait(reference: string): Promise<{ running: number; finished: number; reads: number; keys: number }> {
  const before = await schedulerStoreReads();
  const started = performance.now();
  const reply = await http('POST', `${platform.url('scheduler')}/hooks/deploy`, { serviceName: service, containerRepository: reference, pushedAt: 0 });
  if (reply.status !== 200) throw new Error(`deploy failed: ${JSON.stringify(reply.body)}`);
  const version = reply.body.version as number;
  await waitFor(async () => {
    const units = (await http('GET', `${platform.url('orchestrator')}/services/${service}/units`)).body as { release: number; active: string; sub: string }[];
    return units.filter((u) => u.release === version && u.active === 'active' && u.sub === 'running').length === UNITS;
  }, 120_000, { intervalMs: 10 });
  const running = performance.now() - started;
  await waitFor(async () => (await http('GET', `${platform.url('scheduler')}/deployments/${reply.body.deployment}`)).body.state === 'succeeded', 120_000, { intervalMs: 10 });
  const finished = performance.now() - started;
  const after = await schedulerStoreReads();
  return { running, finished, reads: after.requests - before.requests, keys: after.keys - before.keys };
}

await deployAndWait(images[0]!.reference);
const rollouts: Awaited<ReturnType<typeof deployAndWait>>[] = [];
const floors: number[] = [];
for (let round = 0; round < ROUNDS; round++) {
  floors.push(await dockerApiStart(engine, `${registry.host}/bench/rollout@${images[0]!.digest}`, UNITS));
  rollouts.push(await deployAndWait(images[(round + 1) % 2]!.reference));
}
const running = median(rollouts.map((r) => r.running));
const finished = median(rollouts.map((r) => r.finished));
const floor = median(floors);
printTable([
  { benchmark: `rollout ${UNITS} units, maxSurge ${UNITS}: all new units running`, platform: ms(running), reference: `${ms(floor)} (Docker API create+start)`, ratio: `${(running / floor).toFixed(2)}x`, target: '<= 2x' },
  { benchmark: `rollout ${UNITS} units, maxSurge ${UNITS}: deployment succeeded (old units stopped)`, platform: ms(finished), reference: `${ms(floor)} (Docker API create+start)`, ratio: `${(finished / floor).toFixed(2)}x`, target: '-' },
  { benchmark: `rollout ${UNITS} units: scheduler store reads (keys returned), median`, platform: `${median(rollouts.map((r) => r.reads))} (${median(rollouts.map((r) => r.keys))} keys)`, reference: '-', ratio: '-', target: '-' },
]);
await platform.stop();
