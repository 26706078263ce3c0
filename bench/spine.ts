import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import autocannon from 'autocannon';
import { buildTestImage } from '../test/harness/test-image.js';
import { freePort } from '../test/harness/free-port.js';
import { http, runPlatform, waitHealthy } from '../test/harness/platform.js';
import { waitFor } from '../test/harness/wait.js';
import { untilEngineEmpty } from '../test/harness/docker.js';
import { countArgument, loadAverage, median, ms, pairedRatio, printTable, type BenchRow } from './table.js';
import { dockerApiStart, pullImage, startBenchPlatform } from './bench-platform.js';
import { watchCluster } from './cluster-events.js';
import { rssMiB } from './role-metrics.js';
import { EtcdStore } from '../src/store/etcd-store.js';

// Issue 2's benchmarks, each against a reference measured in the same run:
// deploy latency vs the Docker API, directory reads vs a bare Fastify route, idle RSS per role.

const UNITS = 10;
/** `node dist/bench/spine.js [ROUNDS]`: 10 by default (about a minute). */
const ROUNDS = countArgument(process.argv[2], 'ROUNDS', 10);
const rows: BenchRow[] = [];
console.log(`load average at the start: ${loadAverage()}`);

const platform = await startBenchPlatform(['directory', 'scheduler', 'orchestrator', 'agent'], 'bench');
const { engine, registry } = platform;
const image = await buildTestImage(engine.docker, registry.host, 'bench/web', 'v1');
const pinned = `${registry.host}/bench/web@${image.digest}`;
await pullImage(engine, pinned);
const roles = platform.roles as Required<typeof platform.roles>;
const { directory, scheduler, orchestrator } = roles;

const cluster = await watchCluster(orchestrator.url);

/**
 * Every store write while a deploy is timed (POST to the units running), by record family (the
 * key's segment after /platform/): what the roles commit and watch beside Docker's work.
 */
const commits: { family: string; revision: number; bytes: number }[] = [];
let counting = false;
const watcher = new EtcdStore([platform.etcd.url]);
const watch = await watcher.watchPrefix('/platform/', (event) => {
  if (counting) commits.push({ family: event.key.split('/')[2] ?? event.key, revision: event.modRevision, bytes: event.value?.length ?? 0 });
});
const writesPerDeploy: Map<string, { keys: number; bytes: number }>[] = [];
const transactionsPerDeploy: number[] = [];

/**
 * POST /hooks/deploy until the orchestrator reports 10 units active/running (each passed its
 * readiness probe): told by its event stream, or (`polled`, the method until 2026-11-23) by
 * GET /services/:name/units every 10 ms.
 */
async function platformDeploy(polled = false): Promise<number> {
  const service = `bench-${randomBytes(2).toString('hex')}`;
  await http('POST', `${directory.url}/services`, { name: service, containerImage: `${registry.host}/bench/web`, numInstances: UNITS });
  const running = (units: { service: string; active: string; sub: string }[]) =>
    units.filter((u) => u.service === service && u.active === 'active' && u.sub === 'running').length === UNITS;
  commits.length = 0;
  counting = !polled;
  const started = performance.now();
  const reply = await http('POST', `${scheduler.url}/hooks/deploy`, { serviceName: service, containerRepository: image.reference, pushedAt: 0 });
  if (reply.status !== 200) throw new Error(`deploy failed: ${JSON.stringify(reply.body)}`);
  let finished: number;
  if (polled) {
    await waitFor(async () => running((await http('GET', `${orchestrator.url}/services/${service}/units`)).body), 120_000, { intervalMs: 10 });
    finished = performance.now();
  } else {
    finished = await cluster.until(({ units }) => running(units));
    counting = false;
    const families = new Map<string, { keys: number; bytes: number }>();
    for (const { family, bytes } of commits) {
      const tally = families.get(family) ?? { keys: 0, bytes: 0 };
      families.set(family, { keys: tally.keys + 1, bytes: tally.bytes + bytes });
    }
    writesPerDeploy.push(families);
    transactionsPerDeploy.push(new Set(commits.map((commit) => commit.revision)).size);
  }
  await http('DELETE', `${orchestrator.url}/services/${service}`);
  await cluster.until(({ units }) => !units.some((u) => u.service === service));
  return finished - started;
}

/**
 * Waits until the engine holds no container and then a quarter second more, so that no timed step
 * starts while dockerd still removes the last one's containers (its unmounts and containerd's
 * clean-up would fall into that step's window only).
 */
async function settled(): Promise<void> {
  await untilEngineEmpty(engine.docker, 'the engine emptied');
  await new Promise((resolve) => setTimeout(resolve, 250));
}

// Each round: the floor and a deploy back to back, the floor first in even rounds and the deploy
// first in odd ones (so what one leaves behind, or a drift of the machine, falls on both alike),
// then the floor with bare create options and a deploy timed by polling (the method until 2026-11-23).
const platformTimes: number[] = [];
const dockerTimes: number[] = [];
const bareTimes: number[] = [];
const polledTimes: number[] = [];
const floorStep = async () => {
  await settled();
  dockerTimes.push(await dockerApiStart(engine, pinned, UNITS));
};
const deployStep = async () => {
  await settled();
  platformTimes.push(await platformDeploy());
};
for (let round = 0; round < ROUNDS; round++) {
  for (const step of round % 2 === 0 ? [floorStep, deployStep] : [deployStep, floorStep]) await step();
  await settled();
  bareTimes.push(await dockerApiStart(engine, pinned, UNITS, 'bare'));
  await settled();
  polledTimes.push(await platformDeploy(true));
}
const families = [...new Set(writesPerDeploy.flatMap((deploy) => [...deploy.keys()]))].sort();
const medianOf = (family: string, field: 'keys' | 'bytes') => median(writesPerDeploy.map((deploy) => deploy.get(family)?.[field] ?? 0));
console.log(`store writes while a deploy is timed (median per deploy): ${median(transactionsPerDeploy)} transactions; ${families.map((family) => `${family} ${medianOf(family, 'keys')} keys ${medianOf(family, 'bytes')} B`).join(', ')}`);
console.log(`load average before the table: ${loadAverage()}`);
console.log(`deploy rounds (ms): platform ${platformTimes.map(ms).join(', ')}; floor ${dockerTimes.map(ms).join(', ')}; polled ${polledTimes.map(ms).join(', ')}; bare floor ${bareTimes.map(ms).join(', ')}`);
const floor = median(dockerTimes);
rows.push(
  {
    benchmark: `deploy ${UNITS} units (image present), median of ${ROUNDS}`,
    platform: ms(median(platformTimes)),
    reference: `${ms(floor)} (Docker API create+start, the units' create options)`,
    ratio: `${(median(platformTimes) / floor).toFixed(2)}x`,
    target: '<= 1.1x',
  },
  {
    benchmark: `deploy ${UNITS} units, median of the ${ROUNDS} rounds' own ratios`,
    platform: '-',
    reference: '(the floor measured next to it, order alternating)',
    ratio: pairedRatio(platformTimes, dockerTimes),
    target: '<= 1.1x',
  },
  {
    benchmark: `deploy ${UNITS} units, as measured until 2026-11-23 (GET units every 10 ms; bare create options)`,
    platform: ms(median(polledTimes)),
    reference: `${ms(median(bareTimes))} (Docker API create+start, bare options)`,
    ratio: `${(median(polledTimes) / median(bareTimes)).toFixed(2)}x`,
    target: '-',
  },
);

// Directory reads: the same JSON from etcd through the directory, and from a bare route.
await http('POST', `${directory.url}/services`, { name: 'read-me', containerImage: 'team/web', numInstances: 3, env: { A: '1' } });
const record = (await http('GET', `${directory.url}/services/read-me`)).body;
const barePort = await freePort();
const bare = spawn(process.execPath, [fileURLToPath(new URL('./bare-server.js', import.meta.url)), JSON.stringify(record), String(barePort)], { stdio: ['ignore', 'pipe', 'inherit'] });
await new Promise((resolve) => bare.stdout!.once('data', resolve));

const load = async (url: string) => {
  const result = await autocannon({ url, connections: 16, duration: 5 });
  return result.requests.average;
};
await load(`${directory.url}/services/read-me`); // warm-up
const directoryRps = await load(`${directory.url}/services/read-me`);
const bareRps = await load(`http://127.0.0.1:${barePort}/services/read-me`);
bare.kill();
rows.push({
  benchmark: 'directory GET /services/:name on etcd, req/s',
  platform: directoryRps.toFixed(0),
  reference: `${bareRps.toFixed(0)} (bare Fastify route)`,
  ratio: `${(directoryRps / bareRps).toFixed(2)}x`,
  target: '>= 0.5x',
});

// Idle RSS, after the load has settled.
await new Promise((resolve) => setTimeout(resolve, 3000));
cluster.close();
await watch.close();
await watcher.close();
for (const name of ['directory', 'scheduler', 'orchestrator', 'agent'] as const) {
  const role = roles[name];
  rows.push({ benchmark: `idle RSS, ${name}`, platform: `${rssMiB(role.child.pid!).toFixed(0)} MiB`, reference: '-', ratio: '-', target: '-' });
  await role.stop();
}
// `platform up` listens on fixed ports (9000-9003): on a machine shared with other runs they may
// be taken, and then only this row is lost, not the table.
const up = runPlatform(['up', '--data-dir', `/tmp/platform-bench-${randomBytes(3).toString('hex')}`, '--network', 'host', '--machine-id', 'bench-up'], { DOCKER_HOST: engine.dockerHost });
try {
  await Promise.all([9000, 9001, 9002, 9003].map((port) => waitHealthy(`http://127.0.0.1:${port}`, up)));
  await new Promise((resolve) => setTimeout(resolve, 3000));
  rows.push({ benchmark: 'idle RSS, platform up (all roles)', platform: `${rssMiB(up.child.pid!).toFixed(0)} MiB`, reference: '-', ratio: '-', target: '-' });
} catch (error) {
  rows.push({ benchmark: 'idle RSS, platform up (all roles)', platform: `not measured: ${(error as Error).message.split('\n').slice(0, 2).join(' ')}`, reference: '-', ratio: '-', target: '-' });
}
await up.stop();

printTable(rows);
await platform.stop();
