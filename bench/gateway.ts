import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import autocannon from 'autocannon';
import { buildTestImage } from '../test/harness/test-image.js';
import { freePort } from '../test/harness/free-port.js';
import { http } from '../test/harness/platform.js';
import { waitFor } from '../test/harness/wait.js';
import { median, printTable, type BenchRow } from './table.js';
import { startBenchPlatform } from './bench-platform.js';
import { pacedLoad } from './paced-load.js';

// Issue 6's benchmark: requests per second and latency through the gateway, against HAProxy 2.6
// (Debian's haproxy) balancing the same units round robin with keep-alive, and against one unit
// hit directly: same concurrency, same run, in alternating rounds. The units are real containers
// run by the platform, of two kinds: the test image's Node server, which keeps connections alive
// as nearly every real service does, and its busybox httpd, which closes the connection after
// every response (so every proxied request opens a new upstream connection). Also the CPU time
// each proxy process spends per request (from /proc), which decides throughput on a small machine.

const UNITS = 3;
const CONNECTIONS = 32;
const DURATION_S = 8;
const ROUNDS = 3;
/** Offered load for the latency comparison: well below every target's capacity, so no queueing. */
const FIXED_RATE = 200;
const PACED_CONNECTIONS = 8;
const HAPROXY = '/usr/sbin/haproxy';

type UnitKind = 'keep-alive' | 'busybox';
const unitKinds: UnitKind[] = ['keep-alive', 'busybox'];
const describeUnits: Record<UnitKind, string> = {
  'keep-alive': `${UNITS} keep-alive units (Node)`,
  busybox: `${UNITS} busybox units (close per response)`,
};

const platform = await startBenchPlatform(['directory', 'scheduler', 'agent', 'gateway'], 'bench-gateway');
const { engine, registry } = platform;
const gatewayUrl = platform.url('gateway');
const gatewayPid = platform.roles.gateway!.child.pid!;

interface Measure {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  /** CPU time of the proxy process per request, in microseconds (0 for direct). */
  cpuUs: number;
}

/** utime + stime of a process, in clock ticks (100 per second on Linux). */
const cpuTicks = (pid: number): number => {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return Number(fields[11]) + Number(fields[12]);
};

type Target = 'gateway' | 'haproxy' | 'direct';
type Targets = Record<Target, { url: string; host?: string; pid?: number }>;

/** Full load: as many requests as `CONNECTIONS` keep-alive connections carry, with autocannon. */
async function load(target: Targets[Target], duration = DURATION_S): Promise<Measure> {
  const { url, host, pid } = target;
  const before = pid === undefined ? 0 : cpuTicks(pid);
  const result = await autocannon({ url, duration, connections: CONNECTIONS, ...(host ? { headers: { host } } : {}) });
  const ticks = pid === undefined ? 0 : cpuTicks(pid) - before;
  return {
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: result.errors + result.timeouts + result.non2xx,
    cpuUs: result.requests.total > 0 ? (ticks * 10_000) / result.requests.total : 0,
  };
}

/** A fixed low rate, timed open loop with a sub-millisecond clock (see paced-load.ts). */
async function paced(target: Targets[Target]): Promise<Measure> {
  const { url, host } = target;
  const result = await pacedLoad({ url, ...(host ? { host } : {}), rate: FIXED_RATE, durationMs: DURATION_S * 1000, connections: PACED_CONNECTIONS });
  return { rps: FIXED_RATE, p50: result.p50, p99: result.p99, errors: result.errors, cpuUs: 0 };
}

/** Deploys `UNITS` units of the kind and waits until the gateway routes to all of them. */
async function deployUnits(kind: UnitKind): Promise<{ service: string; addresses: string[] }> {
  const repository = `bench/gateway-${kind}`;
  const image = await buildTestImage(engine.docker, registry.host, repository, 'v1', kind === 'keep-alive' ? { variant: 'keep-alive' } : {});
  const service = `bench-${kind}-${randomBytes(2).toString('hex')}`;
  await http('POST', `${platform.url('directory')}/services`, { name: service, containerImage: `${registry.host}/${repository}`, numInstances: UNITS });
  const deploy = await http('POST', `${platform.url('scheduler')}/hooks/deploy`, { serviceName: service, containerRepository: image.reference, pushedAt: 0 });
  if (deploy.status !== 200) throw new Error(`deploy failed: ${JSON.stringify(deploy.body)}`);
  const addresses = await waitFor(async () => {
    const { routes } = (await http('GET', `${gatewayUrl}/routes`)).body as { routes: { name: string; upstreams: { address: string }[] }[] };
    const upstreams = routes.find((route) => route.name === service)?.upstreams ?? [];
    return upstreams.length === UNITS ? upstreams.map((upstream) => upstream.address) : undefined;
  }, 120_000, { what: `${UNITS} routable ${kind} units` });
  return { service, addresses };
}

/** HAProxy with the same units: round robin, keep-alive on both sides, loopback only. */
async function startHaproxy(addresses: string[]): Promise<{ url: string; pid: number; stop: () => void }> {
  const dir = mkdtempSync(join(tmpdir(), 'platform-haproxy-'));
  const port = await freePort();
  const config = [
    'global',
    '  maxconn 4096',
    'defaults',
    '  mode http',
    '  option http-keep-alive',
    '  timeout connect 5s',
    '  timeout client 60s',
    '  timeout server 60s',
    'frontend bench',
    `  bind 127.0.0.1:${port}`,
    '  default_backend units',
    'backend units',
    '  balance roundrobin',
    ...addresses.map((address, i) => `  server unit${i + 1} ${address}`),
    '',
  ].join('\n');
  writeFileSync(join(dir, 'haproxy.cfg'), config);
  const child = spawn(HAPROXY, ['-f', join(dir, 'haproxy.cfg'), '-db'], { stdio: ['ignore', 'ignore', 'inherit'] });
  const kill = () => child.kill('SIGKILL');
  process.once('exit', kill);
  const url = `http://127.0.0.1:${port}/`;
  await waitFor(async () => (await fetch(url)).ok, 10_000, { what: 'HAProxy' });
  return {
    url,
    pid: child.pid!,
    stop: () => {
      child.kill('SIGTERM');
      process.removeListener('exit', kill);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

const summarise = (runs: Measure[]) => ({
  rps: median(runs.map((m) => m.rps)),
  p50: median(runs.map((m) => m.p50)),
  p99: median(runs.map((m) => m.p99)),
  cpuUs: median(runs.map((m) => m.cpuUs)),
  errors: runs.reduce((sum, m) => sum + m.errors, 0),
});
const ms = (value: number) => `${value.toFixed(2)} ms`;
const signed = (value: number) => `${value >= 0 ? '+' : ''}${value.toFixed(2)} ms`;

async function measureUnits(kind: UnitKind): Promise<BenchRow[]> {
  const { service, addresses } = await deployUnits(kind);
  const haproxy = await startHaproxy(addresses);
  const targets: Targets = {
    gateway: { url: `${gatewayUrl}/`, host: `${service}.platform.internal`, pid: gatewayPid },
    haproxy: { url: haproxy.url, pid: haproxy.pid },
    direct: { url: `http://${addresses[0]}/` },
  };
  const names = Object.keys(targets) as Target[];
  for (const name of names) await load(targets[name], 2); // warm-up: JIT, pools, page cache
  const measured: Record<Target, Measure[]> = { gateway: [], haproxy: [], direct: [] };
  const pacedRuns: Record<Target, Measure[]> = { gateway: [], haproxy: [], direct: [] };
  for (let round = 0; round < ROUNDS; round++) {
    for (const name of names) measured[name].push(await load(targets[name]));
    for (const name of names) pacedRuns[name].push(await paced(targets[name]));
  }
  haproxy.stop();
  await http('DELETE', `${platform.url('directory')}/services/${service}`);

  const gw = summarise(measured.gateway);
  const ha = summarise(measured.haproxy);
  const direct = summarise(measured.direct);
  const gwPaced = summarise(pacedRuns.gateway);
  const haPaced = summarise(pacedRuns.haproxy);
  const directPaced = summarise(pacedRuns.direct);
  const units = describeUnits[kind];
  return [
    {
      benchmark: `req/s, ${units}, ${CONNECTIONS} connections (median of ${ROUNDS} x ${DURATION_S} s)`,
      platform: gw.rps.toFixed(0),
      reference: `${ha.rps.toFixed(0)} (HAProxy 2.6)`,
      ratio: `${(gw.rps / ha.rps).toFixed(2)}x`,
      target: '>= 0.7x',
    },
    { benchmark: `req/s, ${units}: one unit hit directly`, platform: gw.rps.toFixed(0), reference: `${direct.rps.toFixed(0)} (direct)`, ratio: `${(gw.rps / direct.rps).toFixed(2)}x`, target: '-' },
    { benchmark: `p50 latency at full load, ${units}`, platform: ms(gw.p50), reference: `${ms(ha.p50)} HAProxy, ${ms(direct.p50)} direct`, ratio: signed(gw.p50 - ha.p50), target: '-' },
    { benchmark: `p99 latency at full load, ${units}`, platform: ms(gw.p99), reference: `${ms(ha.p99)} HAProxy, ${ms(direct.p99)} direct`, ratio: signed(gw.p99 - ha.p99), target: '-' },
    {
      benchmark: `p50 latency at ${FIXED_RATE} req/s, ${units}`,
      platform: ms(gwPaced.p50),
      reference: `${ms(haPaced.p50)} HAProxy, ${ms(directPaced.p50)} direct`,
      ratio: `${signed(gwPaced.p50 - directPaced.p50)} vs direct`,
      target: '-',
    },
    {
      benchmark: `p99 latency at ${FIXED_RATE} req/s, ${units}`,
      platform: ms(gwPaced.p99),
      reference: `${ms(haPaced.p99)} HAProxy, ${ms(directPaced.p99)} direct`,
      ratio: `${signed(gwPaced.p99 - directPaced.p99)} vs direct, ${signed(gwPaced.p99 - haPaced.p99)} vs HAProxy`,
      target: '<= +2 ms',
    },
    { benchmark: `proxy CPU time per request, ${units}`, platform: `${gw.cpuUs.toFixed(0)} us`, reference: `${ha.cpuUs.toFixed(0)} us (HAProxy)`, ratio: `${(gw.cpuUs / ha.cpuUs).toFixed(2)}x`, target: '-' },
    {
      benchmark: `failed requests (errors, timeouts, non-2xx), ${units}`,
      platform: String(gw.errors + gwPaced.errors),
      reference: `${ha.errors + haPaced.errors} HAProxy, ${direct.errors + directPaced.errors} direct`,
      ratio: '-',
      target: '0',
    },
  ];
}

const kinds = process.argv.slice(2).filter((arg): arg is UnitKind => (unitKinds as string[]).includes(arg));
const rows: BenchRow[] = [];
for (const kind of kinds.length > 0 ? kinds : unitKinds) rows.push(...(await measureUnits(kind)));
printTable(rows);
await platform.stop();
