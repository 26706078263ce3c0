import { readdirSync, readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { doublingDelayMs } from '../src/doubling-delay.js';
import autocannon from 'autocannon';
import type { ClusterUnit } from '../src/schemas/cluster.js';
import { openStore } from '../src/store/open-store.js';
import { startTestHosts, type TestHost, type TestHosts } from '../test/harness/test-hosts.js';
import { hostServices } from '../test/harness/host-services.js';
import { buildTestImage } from '../test/harness/test-image.js';
import { openEventStream } from '../test/harness/event-stream.js';
import { freePort } from '../test/harness/free-port.js';
import { http, runCli, serveRole, type PlatformProcess } from '../test/harness/platform.js';
import { startGateway, type Gateway } from '../test/harness/gateway-cluster.js';
import { buildDashboard, launchChromium } from '../test/browser/chromium.js';
import { countArgument, loadAverage, median, printTable, type BenchRow } from './table.js';
import { dockerApiStart, pullImage } from './bench-platform.js';
import { watchCluster, type ClusterView } from './cluster-events.js';
import { convergenceRows } from './route-convergence.js';
import { rssMiB, storeReads } from './role-metrics.js';
import { cpuTicks } from './proxy-cpu.js';

// Issue 29: the platform at 1,000 units. Test hosts (network namespaces, each its own dockerd and
// agent, test-hosts.ts), etcd and the registry on the test bridge, the directory, scheduler,
// orchestrator and an HAProxy gateway as processes on this machine. In the same run, the floor:
// Docker alone creating and starting the same number of containers (as the agents create units:
// bridge networking, port published) on the same engines, all at once. Then:
// - deploy every service at once → all units running (event stream), against the floor;
// - roll every service to a new image → all units running it, against the floor;
// - at all units: RSS of each role, etcd's database size, p99 of GET /services and GET
//   /cluster/units under 20 clients, the /events snapshot, `platform status`, the dashboard's first
//   render in Chromium, HAProxy route convergence with every service routed;
// - scheduler store reads for one service's deploy with all, half and a quarter of the services;
// - the host with the most units partitioned (link down) → its units running elsewhere.
// Scale parameters are arguments (the issue's numbers by default), so the bench can be tried small:
//   node dist/bench/scale.js --services 20 --units 5
// Progress goes to stderr with the time since the start; the table is printed at the end, also
// after a failure (with the rows measured until then).

const { values: options } = parseArgs({
  options: {
    services: { type: 'string' },
    units: { type: 'string' },
    hosts: { type: 'string' },
    changes: { type: 'string' },
    clients: { type: 'string' },
  },
});
const SERVICES = countArgument(options.services, '--services', 200);
const UNITS = countArgument(options.units, '--units', 5);
const HOSTS = countArgument(options.hosts, '--hosts', 4);
/** Route changes for the convergence figures (half switch a unit on, half off). */
const CHANGES = countArgument(options.changes, '--changes', 100);
/** Concurrent clients of the read API. */
const CLIENTS = countArgument(options.clients, '--clients', 20);
if (HOSTS < 2) throw new Error('--hosts wants 2 or more: one is lost');
const TOTAL = SERVICES * UNITS;
// Room on the hosts left after one is lost for all units, and for a surge unit of every service.
const MAX_UNITS = Math.ceil(TOTAL / (HOSTS - 1)) + SERVICES;
const API_SECONDS = 10;
const rows: BenchRow[] = [];
const began = performance.now();
const progress = (what: string) => console.error(`[scale +${((performance.now() - began) / 1000).toFixed(0)} s] ${what}`);
const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
const names = Array.from({ length: SERVICES }, (_, i) => `scale-${String(i).padStart(3, '0')}`);
const ours = (units: ClusterUnit[], among: readonly string[] = names) => units.filter((unit) => among.includes(unit.service));
const running = (unit: ClusterUnit) => unit.active === 'active' && unit.sub === 'running';
const row = (benchmark: string, platform: string, reference = '-', ratio = '-', target = '-') => {
  // Also as it is measured: a run stopped from outside still leaves its figures so far.
  progress(`${benchmark}: ${platform}${reference === '-' ? '' : ` | ${reference}`}${ratio === '-' ? '' : ` | ${ratio}`}`);
  rows.push({ benchmark, platform, reference, ratio, target });
};

/** In groups of `size`: 200 services' calls at once would each wait their turn in the roles anyway, and time out. */
async function inGroups<T>(items: readonly T[], size: number, each: (item: T) => Promise<unknown>): Promise<void> {
  for (let i = 0; i < items.length; i += size) await Promise.all(items.slice(i, i + size).map(each));
}

/**
 * Every container of the engine removed (before it stops: dockerd stopping with hundreds of them
 * outlasts its bound). Each removal gets a minute: a dockerd that "did not receive an exit event"
 * leaves a removal "in progress" for ever, and the bench hung in its clean-up (2026-11-30); what
 * is left goes with the engine's reaper.
 */
async function emptyEngine(host: TestHost): Promise<void> {
  const containers = await host.engine.docker.listContainers({ all: true });
  await inGroups(containers, 25, (c) => Promise.race([host.engine.docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined), sleep(60_000)]));
}

/** Deploy requests answered 502/503 because etcd missed a role's deadline, and asked again. */
let storeRefusals = 0;

/**
 * One deploy request, asked again (at most 8 times, 0.5 s then doubling up to 8 s: half a minute) when the answer is the
 * store missing its deadline, as a pipeline retries a 503: on these two cores, at 1,000 units,
 * Docker's work alone kept etcd past the roles' 1.5 s deadline now and then (2026-11-29 and -30).
 * Counted and reported; anything else fails the bench.
 */
async function deployAskingAgain(orchestrator: string, name: string, image: string): Promise<void> {
  for (let attempt = 1; ; attempt += 1) {
    const reply = await http('POST', `${orchestrator}/services/${name}/deploy`, { containerRepository: image });
    if (reply.status === 200) return;
    const storeMissed = (reply.status === 502 || reply.status === 503) && JSON.stringify(reply.body).includes('key-value store');
    if (!storeMissed || attempt === 8) throw new Error(`deploying ${name}: ${reply.status} ${JSON.stringify(reply.body)}`);
    storeRefusals += 1;
    await sleep(doublingDelayMs(attempt, 500, 8000));
  }
}

/**
 * Threads running, runnable or in uninterruptible sleep right now: what the load average counts,
 * without its minute-long decay. /proc/stat's procs_blocked counts only those waiting on I/O, and
 * said 0 while the kernel's teardown of 1,000 containers' namespaces kept the load at 352.
 */
function busyThreads(): number {
  let busy = 0;
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    let tids: string[];
    try {
      tids = readdirSync(`/proc/${pid}/task`);
    } catch {
      continue; // gone meanwhile
    }
    for (const tid of tids) {
      try {
        const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
        if (/\) [RD] /.test(stat)) busy += 1;
      } catch {
        // gone meanwhile
      }
    }
  }
  return busy;
}

/**
 * Waits (at most 5 min) until the machine has settled: at most 4 threads running, runnable or
 * blocked in 5 samples running (this process's sampling one of them). The floor's removal of
 * 1,000 containers kept the kernel busy for minutes after it returned (load average 247), and the
 * deploy timed after it would have paid for it.
 */
async function settled(what: string): Promise<void> {
  const start = performance.now();
  for (let quiet = 0; quiet < 5 && performance.now() - start < 5 * 60_000; ) {
    quiet = busyThreads() <= 4 ? quiet + 1 : 0;
    await sleep(1000);
  }
  progress(`settled before ${what} after ${seconds(performance.now() - start)} (load ${loadAverage()})`);
}

let cluster: TestHosts | undefined;
const roles: Record<string, PlatformProcess & { url: string }> = {};
let gateway: Gateway | undefined;
let view: Awaited<ReturnType<typeof watchCluster>> | undefined;
try {
  progress(`starting ${HOSTS} test hosts (agents with PLATFORM_MAX_UNITS=${MAX_UNITS}), load ${loadAverage()}`);
  // etcd at nice -10, as docs/install.md sets it on machines, and its data on tmpfs, standing in for
  // the disk of its own etcd's hardware guide asks for: here the four engines share the machine's
  // one disk with it, and at 1,000 units their work kept etcd past the roles' 1.5 s deadline for
  // minutes (2026-11-29 and -30 runs; nice alone did not help), the deploys refused with 503s.
  // The engines at nice 5: creating 1,000 containers at once, dockerd, containerd and the kernel kept
  // the roles (nice 0) from the CPU for seconds at a time, their store calls missed the 1.5 s
  // deadline and etcd's client opened its circuit breaker (2026-11-30, 106 deploy requests
  // answered 503). The floor runs on the same engines, so the ratios compare like with like.
  cluster = await startTestHosts({ count: HOSTS, agentEnv: { PLATFORM_MAX_UNITS: String(MAX_UNITS) }, etcdOptions: { nice: -10, dataParent: '/dev/shm' }, engineNice: 5 });
  const hosts = cluster.hosts;
  for (const role of ['directory', 'scheduler', 'orchestrator']) roles[role] = await serveRole(role, await freePort(), cluster.flags, cluster.env);
  gateway = await startGateway('haproxy', cluster.flags);
  const orchestrator = roles.orchestrator!.url;
  const services = hostServices(orchestrator, cluster);

  // Both images present on every engine, so the runs time containers, not pulls (the agents deploy by digest).
  const repository = `${cluster.registry.host}/${cluster.repository}`;
  const v2 = await buildTestImage(hosts[0]!.engine.docker, cluster.registry.host, cluster.repository, 'v2', { label: 'two' });
  const digests = [`${repository}@${cluster.image.digest}`, `${repository}@${v2.digest}`];
  for (const host of hosts) for (const image of digests) await pullImage(host.engine, image);
  const images = [cluster.image.reference, v2.reference];

  progress(`declaring ${SERVICES} services of ${UNITS} units`);
  await inGroups(names, 20, (name) => services.declare(name, UNITS));
  view = await watchCluster(orchestrator);
  const deployAll = (among: readonly string[], image: string) => inGroups(among, 50, (name) => deployAskingAgain(orchestrator, name, image));
  /** All of `among`'s units running, each of them the release `release` (none of another left). */
  const allOn = (release: number, among: readonly string[] = names) => (v: ClusterView) => {
    const units = ours(v.units, among);
    return units.length === among.length * UNITS && units.every((unit) => running(unit) && unit.release === release);
  };
  const rolePids = () => ({
    ...Object.fromEntries(Object.entries(roles).map(([name, role]) => [name, role.child.pid!])),
    gateway: gateway!.child.pid!,
    ...Object.fromEntries(hosts.map((host, i) => [`agent ${i + 1}`, host.agent!.child.pid!])),
  });

  // The floor: Docker alone, the same containers on the same engines, all at once.
  progress(`floor: ${TOTAL} containers through the Docker API on ${HOSTS} engines`);
  const perHost = hosts.map((_, i) => Math.floor(TOTAL / HOSTS) + (i < TOTAL % HOSTS ? 1 : 0));
  // Each engine's time is taken before its containers are removed: at 1,000 containers a dockerd
  // under load failed a removal ("did not receive an exit event", 2026-11-29), which is no part of the floor.
  const floorTimes = await Promise.all(
    hosts.map(async (host, i) => {
      let started: number | undefined;
      await dockerApiStart(host.engine, digests[0]!, perHost[i]!, 'bridge-unit', undefined, async (elapsed) => void (started = elapsed)).catch((error: unknown) => {
        if (started === undefined) throw error;
        progress(`removing the floor's containers on ${host.name} failed (${(error as Error).message}); emptying the engine`);
        return emptyEngine(host);
      });
      return started!;
    }),
  );
  const floorMs = Math.max(...floorTimes);
  progress(`floor ${seconds(floorMs)} (engines: ${floorTimes.map(seconds).join(', ')})`);

  // Deploy every service at once.
  const readsBefore = Object.fromEntries(await Promise.all(['directory', 'scheduler', 'orchestrator'].map(async (r) => [r, (await storeReads(roles[r]!.url)).requests] as const)));
  const ticksBefore = Object.fromEntries(Object.entries(rolePids()).map(([name, pid]) => [name, cpuTicks([pid])]));
  await settled('the deploy');
  progress(`deploy: ${SERVICES} services at once`);
  const deployStart = performance.now();
  await deployAll(names, images[0]!);
  const accepted = performance.now() - deployStart;
  const deployMs = (await view.until(allOn(1), 30 * 60_000)) - deployStart;
  progress(`deploy ${seconds(deployMs)} (all accepted after ${seconds(accepted)})`);
  const ratio = (value: number) => `${(value / floorMs).toFixed(2)}x`;
  row(`deploy ${SERVICES} services at once → ${TOTAL} units running (${HOSTS} hosts)`, seconds(deployMs), `${seconds(floorMs)} (Docker API alone, same engines)`, ratio(deployMs), '<= 1.3x');
  const readsAfter = await Promise.all(Object.entries(readsBefore).map(async ([r, before]) => `${r} ${(await storeReads(roles[r]!.url)).requests - before}`));
  row('  store reads during that deploy, by role', readsAfter.join(', '));
  const ticks = Object.entries(rolePids()).map(([name, pid]) => `${name} ${((cpuTicks([pid]) - ticksBefore[name]!) / 100).toFixed(1)}`);
  row('  CPU seconds during that deploy, by role', ticks.join(', '), `2 cores × ${seconds(deployMs)}`);

  // At all units: memory, the store's size, the read API, the event snapshot, the CLI, the dashboard, routes.
  const rss = (when: string) => row(`RSS at ${TOTAL} units (${when}), MiB`, Object.entries(rolePids()).map(([name, pid]) => `${name} ${rssMiB(pid).toFixed(0)}`).join(', '), '-', '-', '<= 150 MiB each');
  rss('after the deploy');
  const etcdMetrics = await (await fetch(`${cluster.etcd!.url}/metrics`)).text();
  const etcdGauge = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(etcdMetrics)?.[1] ?? NaN) / 1024 / 1024;
  row("etcd's database size", `${etcdGauge('etcd_mvcc_db_total_size_in_bytes').toFixed(1)} MiB (${etcdGauge('etcd_mvcc_db_total_size_in_use_in_bytes').toFixed(1)} MiB in use)`);

  for (const path of ['/services', '/cluster/units']) {
    progress(`GET ${path}, ${CLIENTS} clients`);
    const result = await autocannon({ url: `${orchestrator}${path}`, connections: CLIENTS, duration: API_SECONDS, timeout: 30 });
    row(`GET ${path} at ${TOTAL} units, ${CLIENTS} concurrent clients, ${API_SECONDS} s`, `p99 ${result.latency.p99} ms (p50 ${result.latency.p50} ms, ${result.requests.average.toFixed(0)} req/s, ${result.non2xx + result.errors} failed)`);
  }

  const snapshots: { ms: number; bytes: number }[] = [];
  for (let round = 0; round < 3; round++) {
    const opened = performance.now();
    const stream = await openEventStream(orchestrator);
    const snapshot = await stream.next('snapshot', undefined, 60_000);
    snapshots.push({ ms: performance.now() - opened, bytes: Buffer.byteLength(JSON.stringify(snapshot.data)) });
    stream.close();
  }
  row(`GET /events snapshot at ${TOTAL} units, median of 3`, `${median(snapshots.map((s) => s.ms)).toFixed(0)} ms, ${(snapshots[0]!.bytes / 1024).toFixed(0)} KiB`);

  const statusMs: number[] = [];
  for (let round = 0; round < 3; round++) {
    const started = performance.now();
    const run = await runCli(orchestrator, ['status'], {}, 60_000);
    if (run.code !== 0) throw new Error(`platform status failed: ${run.stderr}`);
    statusMs.push(performance.now() - started);
  }
  row(`platform status at ${TOTAL} units (the whole command, Node's start included), median of 3`, `${median(statusMs).toFixed(0)} ms (${statusMs.map((v) => v.toFixed(0)).join(', ')})`, '-', '-', '<= 1 s');

  progress('dashboard in Chromium');
  buildDashboard();
  const browser = await launchChromium();
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    const opened = Date.now();
    await page.goto(`${orchestrator}/#/services`, { timeout: 60_000 });
    // Functions given to waitForFunction and evaluate run in the browser.
    await page.waitForFunction((count) => (globalThis as any).document.querySelectorAll('.service-list .sq-green').length >= count, TOTAL, { timeout: 60_000 });
    const allShown = Date.now() - opened;
    const stats = await page.evaluate(() => ({
      firstPaint: (globalThis as any).performance.getEntriesByName('first-contentful-paint')[0]?.startTime as number | undefined,
      rendered: (globalThis as any).dashboardStats.firstSnapshotRenderedAt as number,
    }));
    row(
      `dashboard at ${TOTAL} units in Chromium: the snapshot rendered, after navigation start`,
      `${stats.rendered.toFixed(0)} ms (first contentful paint ${stats.firstPaint?.toFixed(0) ?? '-'} ms; every unit green ${allShown} ms after page.goto)`,
      '-',
      '-',
      '<= 1.5 s',
    );
  } finally {
    await browser.close();
  }

  progress('route convergence');
  const store = await openStore({ etcd: cluster.flags[1]!.split(','), dataDir: '' });
  try {
    for (const converged of await convergenceRows(store, gateway.port, 'haproxy', CHANGES, `, ${SERVICES + 1} services routed`)) row(converged.benchmark, converged.platform, '-', '-', converged.target);
  } finally {
    await store.close();
  }

  // Roll every service to the new image.
  await settled('the roll');
  progress(`roll: ${SERVICES} services at once`);
  const rollStart = performance.now();
  await deployAll(names, images[1]!);
  const rollMs = (await view.until(allOn(2), 30 * 60_000)) - rollStart;
  progress(`roll ${seconds(rollMs)}`);
  row(`roll ${SERVICES} services to a new release at once (maxSurge 1) → ${TOTAL} new units running`, seconds(rollMs), `${seconds(floorMs)} (the floor above)`, ratio(rollMs), '<= 1.5x');
  rss('after the roll');

  // Scheduler store reads for one service's deploy, with all the services, then half, then a quarter.
  const probe = names[0]!;
  let probeRelease = 2;
  // The fewest of three deploys: the scheduler's other work (a heal pass every 10 s, the clean-up
  // after the deletes below) reads the store too, and lands in one deploy's window or another.
  const readsPerDeploy = async (): Promise<string> => {
    const counted: { requests: number; keys: number }[] = [];
    for (let round = 0; round < 3; round++) {
      probeRelease += 1;
      const before = await storeReads(roles.scheduler!.url);
      await deployAll([probe], images[(probeRelease + 1) % 2]!); // the other image than the release before
      await view!.until(allOn(probeRelease, [probe]), 120_000);
      const after = await storeReads(roles.scheduler!.url);
      counted.push({ requests: after.requests - before.requests, keys: after.keys - before.keys });
    }
    const fewest = counted.reduce((a, b) => (b.requests < a.requests ? b : a));
    return `${fewest.requests} reads (${fewest.keys} keys; of 3 deploys: ${counted.map((c) => c.requests).join(', ')})`;
  };
  const readsAt: string[] = [`${SERVICES} services: ${await readsPerDeploy()}`];

  // One host lost: the one with the most units.
  const current = await http('GET', `${orchestrator}/cluster/units`);
  const counts = hosts.map((host) => (current.body as ClusterUnit[]).filter((unit) => unit.machine === host.name && names.includes(unit.service)).length);
  const victim = hosts[counts.indexOf(Math.max(...counts))]!;
  progress(`partitioning ${victim.name} with ${Math.max(...counts)} units (units per host: ${counts.join(', ')})`);
  const partitionedAt = Date.now();
  victim.partition();
  const lostAt = performance.now();
  // Where the time goes: until the scheduler counts the host lost (its agent's lease, the TTL,
  // then the first reschedule deployment), and from there until the units run elsewhere.
  const noticed = view.until((v) => [...v.deployments.values()].some((d) => d.trigger === 'reschedule' && Date.parse(d.createdAt) >= partitionedAt), 10 * 60_000);
  const movedMs =
    (await view.until((v) => {
      const units = ours(v.units);
      return units.length === TOTAL && units.every((unit) => running(unit) && unit.machine !== victim.name);
    }, 10 * 60_000)) - lostAt;
  const noticedMs = (await noticed) - lostAt;
  progress(`moved after ${seconds(movedMs)}`);
  row(
    `one host lost (link down) with ${Math.max(...counts)} units → all running elsewhere`,
    `${seconds(movedMs)} (the first reschedule after ${seconds(noticedMs)}: the agent's lease TTL is 10 s)`,
    'issue 29: 13 s for 40 units (once 37 s)',
    '-',
    '<= 15 s',
  );

  // Half, then a quarter, of the services left (deleted in groups): the probe's deploy again.
  let remaining = names;
  for (const keep of [Math.ceil(SERVICES / 2), Math.ceil(SERVICES / 4)]) {
    const gone = remaining.slice(keep);
    remaining = remaining.slice(0, keep);
    progress(`deleting ${gone.length} services, ${keep} left`);
    await inGroups(gone, 10, async (name) => {
      const reply = await http('DELETE', `${orchestrator}/services/${name}`);
      if (reply.status !== 204) throw new Error(`deleting ${name}: ${reply.status} ${JSON.stringify(reply.body)}`);
    });
    readsAt.push(`${keep} services: ${await readsPerDeploy()}`);
  }
  row(`scheduler store reads for one service's deploy (${UNITS} units), with the other services deployed, the fewest of 3`, readsAt.join('; '), '-', '-', 'independent of the number of services');
} catch (error) {
  console.error(`scale bench failed: ${(error as Error).stack ?? error}${(error as Error).cause ? `\ncaused by: ${String((error as Error).cause)}` : ''}`);
  for (const [name, role] of Object.entries(roles)) console.error(`--- ${name} (exit ${role.child.exitCode ?? role.child.signalCode ?? 'running'}):\n${role.output()}`);
  process.exitCode = 1;
} finally {
  if (view) row('GET /events streams the orchestrator ended during the run (its store ping failed), reopened by the bench', String(view.reopened()));
  row('deploy requests answered 502/503 because etcd missed a deadline, asked again by the bench', String(storeRefusals));
  console.log(`\nbench/scale.ts: ${SERVICES} services × ${UNITS} units on ${HOSTS} test hosts; load average at the end ${loadAverage()}; ${((performance.now() - began) / 60_000).toFixed(1)} min`);
  printTable(rows);
  view?.close();
  progress('cleaning up');
  await gateway?.stop().catch(() => undefined);
  await Promise.all(Object.values(roles).map((role) => role.stop()));
  if (cluster) {
    await Promise.all(cluster.hosts.map((host) => host.agent?.stop()));
    await Promise.all(cluster.hosts.map((host) => emptyEngine(host).catch(() => undefined)));
    await cluster.stop();
  }
  progress('done');
}
