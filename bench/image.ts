import { startDockerd } from '../test/harness/docker.js';
import { startEtcd } from '../test/harness/etcd.js';
import { freePort } from '../test/harness/free-port.js';
import { runPlatform, serveRole, waitHealthy, type PlatformProcess } from '../test/harness/platform.js';
import { buildPlatformImage, makeNodeBaseImage, runRoleContainer, waitAnswering } from '../test/harness/platform-image.js';
import { median, ms, printTable, type BenchRow } from './table.js';

// Issue 15's image rows: the image's size (and its build context's), and each role's cold start in
// a container (create + start to GET /readyz 200) against the same role started as a plain
// `node bin/platform serve` process in the same run. Every measured role runs against one etcd,
// with a directory, scheduler and orchestrator running as processes for the roles whose readiness
// needs peers (pinned by URL, so a measured role never becomes another's peer).

const ROUNDS = 3;
const roles = ['directory', 'scheduler', 'orchestrator', 'agent', 'gateway', 'web'] as const;
type Role = (typeof roles)[number];

const engine = await startDockerd();
const etcd = await startEtcd();
const base = await makeNodeBaseImage(engine.docker);
const build = await buildPlatformImage(engine, base, 'platform-bench/platform:latest');

const flags = ['--etcd', etcd.url];
const peers = {
  directory: await serveRole('directory', await freePort(), flags),
  scheduler: await serveRole('scheduler', await freePort(), flags),
};
const orchestrator = await serveRole('orchestrator', await freePort(), [...flags, '--directory-url', peers.directory.url, '--scheduler-url', peers.scheduler.url]);

function roleFlags(role: Role, round: number): string[] {
  switch (role) {
    case 'orchestrator':
      return ['--directory-url', peers.directory.url, '--scheduler-url', peers.scheduler.url];
    case 'web':
      return ['--orchestrator-url', orchestrator.url];
    case 'agent':
      return ['--network', 'host', '--machine-id', `bench-${round}`];
    default:
      return [];
  }
}

async function processColdStart(role: Role, round: number): Promise<number> {
  const port = await freePort();
  const started = performance.now();
  const child: PlatformProcess = runPlatform(['serve', '--role', role, '--port', String(port), ...flags, ...roleFlags(role, round)], role === 'agent' ? { DOCKER_HOST: engine.dockerHost } : {});
  try {
    await waitHealthy(`http://127.0.0.1:${port}`, child, 60_000, '/readyz');
    return performance.now() - started;
  } finally {
    await child.stop();
  }
}

async function containerColdStart(role: Role, round: number): Promise<number> {
  const started = performance.now();
  const container = await runRoleContainer(engine.docker, build.tag, role, await freePort(), {
    flags: [...flags, ...roleFlags(role, round)],
    ...(role === 'agent' ? { env: { DOCKER_HOST: 'unix:///var/run/docker.sock' }, binds: [`${engine.socket}:/var/run/docker.sock`] } : {}),
  });
  try {
    await waitAnswering(container, '/readyz', 60_000);
    return performance.now() - started;
  } finally {
    await container.remove();
  }
}

const baseBytes = (await engine.docker.getImage(base).inspect()).Size;
const rows: BenchRow[] = [
  {
    benchmark: 'image size (DIST=context)',
    platform: `${(build.imageBytes / 1e6).toFixed(0)} MB`,
    reference: `${(baseBytes / 1e6).toFixed(0)} MB base image (this machine's Node 20, npm, busybox)`,
    ratio: `+${((build.imageBytes - baseBytes) / 1e6).toFixed(0)} MB`,
    target: '-',
  },
  {
    benchmark: 'docker build context',
    platform: `${(build.contextBytes / 1e6).toFixed(1)} MB`,
    reference: '262 MB with nothing ignored (issue 15)',
    ratio: '-',
    target: 'only what the image needs',
  },
];
for (const role of roles) {
  const inContainer: number[] = [];
  const asProcess: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    inContainer.push(await containerColdStart(role, round));
    asProcess.push(await processColdStart(role, round));
  }
  const [container, plain] = [median(inContainer), median(asProcess)];
  rows.push({
    benchmark: `cold start to /readyz 200: ${role} (median of ${ROUNDS})`,
    platform: `${ms(container)} in a container`,
    reference: `${ms(plain)} as a process`,
    ratio: `${(container / plain).toFixed(2)}x`,
    target: '-',
  });
}

await Promise.all([orchestrator.stop(), peers.directory.stop(), peers.scheduler.stop()]);
await etcd.stop();
await engine.stop();
printTable(rows);
