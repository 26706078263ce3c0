import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import autocannon from 'autocannon';
import { startEtcd } from '../test/harness/etcd.js';
import { startDockerd } from '../test/harness/docker.js';
import { startRegistry } from '../test/harness/registry.js';
import { buildTestImage } from '../test/harness/test-image.js';
import { freePort } from '../test/harness/free-port.js';
import { http, runPlatform, serveRole, waitHealthy } from '../test/harness/platform.js';
import { waitFor } from '../test/harness/wait.js';
import { median, ms, printTable, type BenchRow } from './table.js';

// Issue 2's benchmarks, each against a reference measured in the same run:
// deploy latency vs the Docker API, directory reads vs a bare Fastify route, idle RSS per role.

const UNITS = 10;
const ROUNDS = 3;
const rows: BenchRow[] = [];

const etcd = await startEtcd();
const engine = await startDockerd();
const registry = await startRegistry();
const image = await buildTestImage(engine.docker, registry.host, 'bench/web', 'v1');
const pinned = `${registry.host}/bench/web@${image.digest}`;
await new Promise<void>((resolve, reject) =>
  engine.docker.pull(pinned, {}, (error, stream) => (error ? reject(error) : engine.docker.modem.followProgress(stream!, (e) => (e ? reject(e) : resolve())))),
);

const flags = ['--etcd', etcd.url];
const directory = await serveRole('directory', await freePort(), flags);
const scheduler = await serveRole('scheduler', await freePort(), flags);
const orchestrator = await serveRole('orchestrator', await freePort(), flags);
const agent = await serveRole('agent', await freePort(), [...flags, '--network', 'host', '--machine-id', 'bench', '--stop-grace', '1'], { DOCKER_HOST: engine.dockerHost });
const roles = { directory, scheduler, orchestrator, agent };

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

async function dockerApiDeploy(): Promise<number> {
  const prefix = `ref-${randomBytes(2).toString('hex')}`;
  const ports = await Promise.all(Array.from({ length: UNITS }, () => freePort()));
  const started = performance.now();
  const containers = await Promise.all(
    ports.map(async (port, i) => {
      const container = await engine.docker.createContainer({
        name: `${prefix}-${i + 1}.service`,
        Image: pinned,
        Env: [`PORT=${port}`],
        HostConfig: { NetworkMode: 'host' },
      });
      await container.start();
      return container;
    }),
  );
  const elapsed = performance.now() - started;
  await Promise.all(containers.map((c) => c.remove({ force: true })));
  return elapsed;
}

const platformTimes: number[] = [];
const dockerTimes: number[] = [];
for (let round = 0; round < ROUNDS; round++) {
  dockerTimes.push(await dockerApiDeploy());
  platformTimes.push(await platformDeploy());
}
const deployRatio = median(platformTimes) / median(dockerTimes);
rows.push({
  benchmark: `deploy ${UNITS} units (image present), median of ${ROUNDS}`,
  platform: ms(median(platformTimes)),
  reference: `${ms(median(dockerTimes))} (Docker API create+start)`,
  ratio: `${deployRatio.toFixed(2)}x`,
  target: '<= 1.5x',
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
for (const [name, role] of Object.entries(roles)) {
  rows.push({ benchmark: `idle RSS, ${name}`, platform: `${rssMiB(role.child.pid!).toFixed(0)} MiB`, reference: '-', ratio: '-', target: '-' });
  await role.stop();
}
const up = runPlatform(['up', '--data-dir', `/tmp/platform-bench-${randomBytes(3).toString('hex')}`, '--network', 'host', '--machine-id', 'bench-up'], { DOCKER_HOST: engine.dockerHost });
await Promise.all([9000, 9001, 9002, 9003].map((port) => waitHealthy(`http://127.0.0.1:${port}`, up)));
await new Promise((resolve) => setTimeout(resolve, 3000));
rows.push({ benchmark: 'idle RSS, platform up (all roles)', platform: `${rssMiB(up.child.pid!).toFixed(0)} MiB`, reference: '-', ratio: '-', target: '-' });
await up.stop();

printTable(rows);
await registry.stop();
await engine.stop();
await etcd.stop();
process.exit(0);
