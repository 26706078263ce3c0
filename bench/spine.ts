import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import autocannon from 'autocannon';
import { buildTestImage } from '../test/harness/test-image.js';
import { freePort } from '../test/harness/free-port.js';
import { http, runPlatform, waitHealthy } from '../test/harness/platform.js';
import { waitFor } from '../test/harness/wait.js';
import { median, ms, printTable, type BenchRow } from './table.js';
import { dockerApiStart, pullImage, startBenchPlatform } from './bench-platform.js';

// Issue 2's benchmarks, each against a reference measured in the same run:
// deploy latency vs the Docker API, directory reads vs a bare Fastify route, idle RSS per role.

const UNITS = 10;
const ROUNDS = 3;
const rows: BenchRow[] = [];

const platform = await startBenchPlatform(['directory', 'scheduler', 'orchestrator', 'agent'], 'bench');
const { engine, registry } = platform;
const image = await buildTestImage(engine.docker, registry.host, 'bench/web', 'v1');
const pinned = `${registry.host}/bench/web@${image.digest}`;
await pullImage(engine, pinned);
const roles = platform.roles as Required<typeof platform.roles>;
const { directory, scheduler, orchestrator } = roles;

async function platformDeploy(): Promise<number> {
  const service = `bench-${randomBytes(2).toString('hex')}`;
  await http('POST', `${directory.url}/services`, { name: service, containerImage: `${registry.host}/bench/web`, numInstances: UNITS });
  const started = performance.now();
  const reply = await http('POST', `${scheduler.url}/hooks/deploy`, { serviceName: service, containerRepository: image.reference, pushedAt: 0 });
  if (reply.status !== 200) throw new Error(`deploy failed: ${JSON.stringify(reply.body)}`);
  await waitFor(async () => {
    const units = (await http('GET', `${orchestrator.url}/services/${service}/units`)).body as { active: string; sub: string }[];
    return units.filter((u) => u.active === 'active' && u.sub === 'running').length === UNITS;
  }, 120_000, { intervalMs: 10 });
  const elapsed = performance.now() - started;
  await http('DELETE', `${orchestrator.url}/services/${service}`);
  return elapsed;
}

const platformTimes: number[] = [];
const dockerTimes: number[] = [];
for (let round = 0; round < ROUNDS; round++) {
  dockerTimes.push(await dockerApiStart(engine, pinned, UNITS));
  platformTimes.push(await platformDeploy());
}
const deployRatio = median(platformTimes) / median(dockerTimes);
rows.push({
  benchmark: `deploy ${UNITS} units (image present), median of ${ROUNDS}`,
  platform: ms(median(platformTimes)),
  reference: `${ms(median(dockerTimes))} (Docker API create+start)`,
  ratio: `${deployRatio.toFixed(2)}x`,
  target: '<= 1.1x',
});

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
const rssMiB = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;
for (const name of ['directory', 'scheduler', 'orchestrator', 'agent'] as const) {
  const role = roles[name];
  rows.push({ benchmark: `idle RSS, ${name}`, platform: `${rssMiB(role.child.pid!).toFixed(0)} MiB`, reference: '-', ratio: '-', target: '-' });
  await role.stop();
}
const up = runPlatform(['up', '--data-dir', `/tmp/platform-bench-${randomBytes(3).toString('hex')}`, '--network', 'host', '--machine-id', 'bench-up'], { DOCKER_HOST: engine.dockerHost });
await Promise.all([9000, 9001, 9002, 9003].map((port) => waitHealthy(`http://127.0.0.1:${port}`, up)));
await new Promise((resolve) => setTimeout(resolve, 3000));
rows.push({ benchmark: 'idle RSS, platform up (all roles)', platform: `${rssMiB(up.child.pid!).toFixed(0)} MiB`, reference: '-', ratio: '-', target: '-' });
await up.stop();

printTable(rows);
await platform.stop();
