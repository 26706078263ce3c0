import { readFileSync, readdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { randomBytes } from 'node:crypto';
import { buildTestImage } from '../test/harness/test-image.js';
import { http } from '../test/harness/platform.js';
import { countArgument, median, ms } from './table.js';
import { dockerApiStart, pullImage, startBenchPlatform, type BenchRole } from './bench-platform.js';
import { watchCluster } from './cluster-events.js';
import { processCpuNanoseconds } from './proxy-cpu.js';

// Where a 10-unit deploy's CPU goes: the CPU time (user + system, from /proc/<pid>/stat, reaped
// children included) each process spends during the deploy's window (POST /hooks/deploy → the
// event stream says all 10 running) against the floor's window (create + start of 10 containers
// through the Docker API), by process: each role, etcd, dockerd, containerd, the containers'
// shims (runc reaped by them), the units' own processes, this bench; and the machine's total from
// /proc/stat, whose excess over the named processes is everything else running. Beside it, etcd's
// own counters (from its /metrics) of the requests and watch events of each window.
// `--timeline` also samples the roles', etcd's and dockerd's CPU every 5 ms of the deploys and
// prints it per 50 ms slice; the sampling costs this bench about 0.1 ms of CPU a millisecond,
// which then shows in its row, so the table is best read from a run without it.
//   node dist/bench/deploy-cpu.js [rounds] [--timeline]

const UNITS = 10;
const ROUNDS = countArgument(process.argv.slice(2).find((arg) => arg !== '--timeline'), 'rounds', 6);
const TIMELINE = process.argv.includes('--timeline');
const ROLES: BenchRole[] = ['directory', 'scheduler', 'orchestrator', 'agent'];
const TICK_MS = 1000 / 100; // USER_HZ: 100 on Linux

const platform = await startBenchPlatform(ROLES, 'bench');
const { engine, registry, etcd } = platform;
const image = await buildTestImage(engine.docker, registry.host, 'bench/web', 'v1');
const pinned = `${registry.host}/bench/web@${image.digest}`;
await pullImage(engine, pinned);
const cluster = await watchCluster(platform.url('orchestrator'));
const engineDir = dirname(engine.socket);

interface Proc {
  pid: number;
  ppid: number;
  comm: string;
  ticks: number;
}

function processes(): Map<number, Proc> {
  const all = new Map<number, Proc>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const close = stat.lastIndexOf(')');
      const comm = stat.slice(stat.indexOf('(') + 1, close);
      const fields = stat.slice(close + 2).split(' ');
      // Fields after the name: state ppid … utime(12) stime(13) cutime(14) cstime(15).
      const ticks = Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14]);
      all.set(Number(entry), { pid: Number(entry), ppid: Number(fields[1]), comm, ticks });
    } catch {
      // gone meanwhile
    }
  }
  return all;
}

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return '';
  }
}

const rolePids = new Map(ROLES.map((role) => [platform.roles[role]!.child.pid!, role]));

/** Which bucket a process's CPU counts in, or undefined for processes of other runs. */
function bucketOf(proc: Proc, all: Map<number, Proc>): string | undefined {
  if (proc.pid === process.pid) return 'bench';
  const role = rolePids.get(proc.pid);
  if (role) return role;
  if (proc.comm === 'etcd' && proc.ppid === process.pid) return 'etcd';
  if (proc.comm === 'dockerd' && proc.ppid === process.pid) return 'dockerd';
  const parent = all.get(proc.ppid);
  if (proc.comm === 'containerd' && parent?.comm === 'dockerd' && parent.ppid === process.pid) return 'containerd';
  if (proc.comm.startsWith('containerd-shim') && cmdline(proc.pid).includes(engineDir)) return 'shims (runc reaped)';
  if (parent && parent.comm.startsWith('containerd-shim') && cmdline(parent.pid).includes(engineDir)) return 'units';
  return undefined;
}

function machineTicks(): number {
  const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal: busy is all but idle and iowait.
  return cpu.slice(0, 8).reduce((sum, value, i) => (i === 3 || i === 4 ? sum : sum + value), 0);
}

/** Store reads each role made (its platform_store_reads_total), beside etcd's own counters. */
async function roleReads(counters: Record<string, number>): Promise<void> {
  await Promise.all(
    ROLES.map(async (role) => {
      const text = await (await fetch(`${platform.url(role)}/metrics`)).text();
      const reads = [...text.matchAll(/^platform_store_reads_total(?:\{[^}]*\})? ([0-9.e+]+)$/gm)].reduce((sum, match) => sum + Number(match[1]), 0);
      counters[`reads by ${role}`] = reads;
    }),
  );
}

async function etcdCounters(): Promise<Record<string, number>> {
  const text = await (await fetch(`${etcd.url}/metrics`)).text();
  const counters: Record<string, number> = {};
  await roleReads(counters);
  for (const line of text.split('\n')) {
    const handled = /^grpc_server_handled_total\{.*grpc_method="(\w+)".*\} (\S+)$/.exec(line);
    if (handled) counters[handled[1]!] = (counters[handled[1]!] ?? 0) + Number(handled[2]);
    const events = /^etcd_debugging_mvcc_events_total (\S+)$/.exec(line);
    if (events) counters['watch events sent'] = Number(events[1]);
    const fsync = /^etcd_disk_wal_fsync_duration_seconds_count (\S+)$/.exec(line);
    if (fsync) counters['WAL fsyncs'] = Number(fsync[1]);
  }
  return counters;
}

/** processCpuNanoseconds, 0 for a process gone meanwhile. */
function runNs(pid: number): number {
  try {
    return processCpuNanoseconds(pid);
  } catch {
    return 0;
  }
}

const TIMELINE_MS = 50;

/**
 * Samples the roles', etcd's and dockerd's CPU every few milliseconds until stopped, and adds it
 * up per 50 ms slice of the window: which process works when (before the creates, while Docker
 * creates and starts, after).
 */
function timeline(pids: Map<string, number>): () => Map<string, number[]> {
  const slices = new Map<string, number[]>([...pids.keys()].map((name) => [name, []]));
  const started = performance.now();
  let last = new Map([...pids].map(([name, pid]) => [name, runNs(pid)]));
  const sample = () => {
    const slice = Math.floor((performance.now() - started) / TIMELINE_MS);
    const now = new Map([...pids].map(([name, pid]) => [name, runNs(pid)]));
    for (const [name, ns] of now) {
      const list = slices.get(name)!;
      while (list.length <= slice) list.push(0);
      list[slice] += (ns - last.get(name)!) / 1e6;
    }
    last = now;
  };
  const timer = setInterval(sample, 5);
  return () => {
    clearInterval(timer);
    sample();
    return slices;
  };
}

interface Window {
  ms: number;
  cpu: Record<string, number>;
  etcd: Record<string, number>;
}

/** Starts a window: its end gives the CPU milliseconds each bucket spent since, with `elapsed` as its wall time. */
async function windowStart(): Promise<(elapsed: number) => Promise<Window>> {
  const [beforeEtcd, before, beforeMachine] = [await etcdCounters(), processes(), machineTicks()];
  return (elapsed) => windowEnd(elapsed, beforeEtcd, before, beforeMachine);
}

async function windowEnd(elapsed: number, beforeEtcd: Record<string, number>, before: Map<number, Proc>, beforeMachine: number): Promise<Window> {
  const [after, afterMachine, afterEtcd] = [processes(), machineTicks(), await etcdCounters()];
  const cpu: Record<string, number> = {};
  let named = 0;
  for (const proc of after.values()) {
    const bucket = bucketOf(proc, after);
    if (!bucket) continue;
    const spent = (proc.ticks - (before.get(proc.pid)?.ticks ?? 0)) * TICK_MS;
    cpu[bucket] = (cpu[bucket] ?? 0) + spent;
    named += spent;
  }
  cpu['whole machine'] = (afterMachine - beforeMachine) * TICK_MS;
  cpu['not named above'] = cpu['whole machine'] - named;
  const etcdDelta = Object.fromEntries(Object.entries(afterEtcd).map(([key, value]) => [key, value - (beforeEtcd[key] ?? 0)]));
  return { ms: elapsed, cpu, etcd: etcdDelta };
}

async function deploy(): Promise<number> {
  const service = `bench-${randomBytes(2).toString('hex')}`;
  await http('POST', `${platform.url('directory')}/services`, { name: service, containerImage: `${registry.host}/bench/web`, numInstances: UNITS });
  await new Promise((resolve) => setTimeout(resolve, 100));
  const running = (units: { service: string; active: string; sub: string }[]) =>
    units.filter((u) => u.service === service && u.active === 'active' && u.sub === 'running').length === UNITS;
  const end = await windowStart();
  const stopTimeline = TIMELINE ? timeline(timelinePids) : undefined;
  const started = performance.now();
  const reply = await http('POST', `${platform.url('scheduler')}/hooks/deploy`, { serviceName: service, containerRepository: image.reference, pushedAt: 0 });
  if (reply.status !== 200) throw new Error(`deploy failed: ${JSON.stringify(reply.body)}`);
  const finished = await cluster.until(({ units }) => running(units));
  const slices = stopTimeline?.();
  const window = await end(finished - started);
  deploys.push(window);
  if (slices) timelines.push(slices);
  await http('DELETE', `${platform.url('orchestrator')}/services/${service}`);
  await cluster.until(({ units }) => !units.some((u) => u.service === service));
  await new Promise((resolve) => setTimeout(resolve, 300));
  return window.ms;
}

const timelines: Map<string, number[]>[] = [];
const children = [...processes().values()].filter((proc) => proc.ppid === process.pid);
const timelinePids = new Map<string, number>([
  ...ROLES.map((role): [string, number] => [role, platform.roles[role]!.child.pid!]),
  ['etcd', children.find((proc) => proc.comm === 'etcd')!.pid],
  ['dockerd', children.find((proc) => proc.comm === 'dockerd')!.pid],
]);
const floors: Window[] = [];
const deploys: Window[] = [];
await deploy(); // warm-up: the image check, the first pass's caches
deploys.length = 0;
for (let round = 0; round < ROUNDS; round++) {
  // The floor removes its containers after its clock stops; the window ends with the clock.
  let floorWindow: Window | undefined;
  const end = await windowStart();
  await dockerApiStart(engine, pinned, UNITS, 'unit', undefined, async (elapsed) => {
    floorWindow = await end(elapsed);
  });
  await new Promise((resolve) => setTimeout(resolve, 300));
  floors.push(floorWindow!);
  await deploy();
  const last = (list: Window[]) => list[list.length - 1]!;
  console.log(`round ${round + 1}: floor ${ms(last(floors).ms)} (${ms(last(floors).cpu['whole machine']!)} CPU), deploy ${ms(last(deploys).ms)} (${ms(last(deploys).cpu['whole machine']!)} CPU)`);
}

const buckets = [...new Set([...floors, ...deploys].flatMap((w) => Object.keys(w.cpu)))];
const order = ['dockerd', 'containerd', 'shims (runc reaped)', 'units', 'etcd', ...ROLES, 'bench', 'not named above', 'whole machine'];
buckets.sort((a, b) => order.indexOf(a) - order.indexOf(b));
const med = (list: Window[], pick: (w: Window) => number | undefined) => median(list.map((w) => pick(w) ?? 0));
console.log(`\nCPU ms per window, median of ${ROUNDS} rounds (wall: floor ${ms(med(floors, (w) => w.ms))}, deploy ${ms(med(deploys, (w) => w.ms))})`);
console.log('| process | floor | deploy | deploy - floor |\n|---|---|---|---|');
for (const bucket of buckets) {
  const floor = med(floors, (w) => w.cpu[bucket]);
  const platformCpu = med(deploys, (w) => w.cpu[bucket]);
  console.log(`| ${bucket} | ${floor.toFixed(0)} | ${platformCpu.toFixed(0)} | ${(platformCpu - floor).toFixed(0)} |`);
}
const counters = [...new Set(deploys.flatMap((w) => Object.keys(w.etcd)))].filter((key) => deploys.some((w) => w.etcd[key]));
console.log('\netcd per deploy window, median (the floor touches no store):');
for (const key of counters.sort()) console.log(`  ${key.padEnd(20)} ${med(deploys, (w) => w.etcd[key]).toFixed(0)}`);
// The first rounds' deploys slice by slice (the windows differ in length, so no median).
if (TIMELINE) console.log(`\nCPU ms per ${TIMELINE_MS} ms slice of the first deploys' windows, from /proc/<pid>/task/*/schedstat:`);
for (const [round, slices] of timelines.slice(0, 3).entries()) {
  console.log(`deploy ${round + 1}:`);
  for (const [name, list] of slices) console.log(`  ${name.padEnd(12)} ${list.map((ms) => ms.toFixed(0).padStart(3)).join(' ')}`);
}
cluster.close();
await platform.stop();
