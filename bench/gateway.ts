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

// Issue 6's benchmark: requests per second and latency through the gateway, against HAProxy 2.6
// (Debian's haproxy) balancing the same units round robin with keep-alive, and against one unit
// hit directly: same concurrency, same run, in alternating rounds. The units are real containers
// of the test image (busybox httpd) run by the platform. Also the CPU time each proxy process
// spends per request (from /proc), which is what decides throughput on a small machine.

const UNITS = 3;
const CONNECTIONS = 32;
const DURATION_S = 8;
const ROUNDS = 3;
/** Offered load for the latency comparison: well below every target's capacity, so no queueing. */
const FIXED_RATE = 200;
const HAPROXY = '/usr/sbin/haproxy';

const platform = await startBenchPlatform(['directory', 'scheduler', 'agent', 'gateway'], 'bench-gateway');
const { engine, registry } = platform;
const image = await buildTestImage(engine.docker, registry.host, 'bench/gateway', 'v1');
const gatewayUrl = platform.url('gateway');

const service = `bench-${randomBytes(2).toString('hex')}`;
await http('POST', `${platform.url('directory')}/services`, { name: service, containerImage: `${registry.host}/bench/gateway`, numInstances: UNITS });
const deploy = await http('POST', `${platform.url('scheduler')}/hooks/deploy`, { serviceName: service, containerRepository: image.reference, pushedAt: 0 });
if (deploy.status !== 200) throw new Error(`deploy failed: ${JSON.stringify(deploy.body)}`);
const addresses = await waitFor(async () => {
  const routes = (await http('GET', `${gatewayUrl}/routes`)).body as { name: string; upstreams: { address: string }[] }[];
  const upstreams = routes.find((route) => route.name === service)?.upstreams ?? [];
  return upstreams.length === UNITS ? upstreams.map((upstream) => upstream.address) : undefined;
}, 120_000, { what: `${UNITS} routable units` });

// HAProxy with the same units: round robin, keep-alive on both sides, loopback only.
const haproxyDir = mkdtempSync(join(tmpdir(), 'platform-haproxy-'));
const haproxyPort = await freePort();
const haproxyConfig = [
  'global',
  '  maxconn 4096',
  'defaults',
  '  mode http',
  '  option http-keep-alive',
  '  timeout connect 5s',
  '  timeout client 60s',
  '  timeout server 60s',
  'frontend bench',
  `  bind 127.0.0.1:${haproxyPort}`,
  '  default_backend units',
  'backend units',
  '  balance roundrobin',
  ...addresses.map((address, i) => `  server unit${i + 1} ${address}`),
  '',
].join('\n');
writeFileSync(join(haproxyDir, 'haproxy.cfg'), haproxyConfig);
const haproxy = spawn(HAPROXY, ['-f', join(haproxyDir, 'haproxy.cfg'), '-db'], { stdio: ['ignore', 'ignore', 'inherit'] });
const killHaproxy = () => haproxy.kill('SIGKILL');
process.once('exit', killHaproxy);
await waitFor(async () => (await fetch(`http://127.0.0.1:${haproxyPort}/`)).ok, 10_000, { what: 'HAProxy' });

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
const targets: Record<Target, { url: string; host?: string; pid?: number }> = {
  gateway: { url: `${gatewayUrl}/`, host: `${service}.platform.internal`, pid: platform.roles.gateway!.child.pid! },
  haproxy: { url: `http://127.0.0.1:${haproxyPort}/`, pid: haproxy.pid! },
  direct: { url: `http://${addresses[0]}/` },
};

async function load(target: Target, duration = DURATION_S, rate?: number): Promise<Measure> {
  const { url, host, pid } = targets[target];
  const before = pid === undefined ? 0 : cpuTicks(pid);
  const result = await autocannon({
    url,
    duration,
    ...(rate === undefined ? { connections: CONNECTIONS } : { connections: 8, overallRate: rate }),
    ...(host ? { headers: { host } } : {}),
  });
  const ticks = pid === undefined ? 0 : cpuTicks(pid) - before;
  return {
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: result.errors + result.timeouts + result.non2xx,
    cpuUs: result.requests.total > 0 ? (ticks * 10_000) / result.requests.total : 0,
  };
}

const names = Object.keys(targets) as Target[];
for (const name of names) await load(name, 2); // warm-up: JIT, pools, page cache
const measured: Record<Target, Measure[]> = { gateway: [], haproxy: [], direct: [] };
const paced: Record<Target, Measure[]> = { gateway: [], haproxy: [], direct: [] };
for (let round = 0; round < ROUNDS; round++) {
  for (const name of names) measured[name].push(await load(name));
  for (const name of names) paced[name].push(await load(name, DURATION_S, FIXED_RATE));
}

const summarise = (runs: Measure[]) => ({
  rps: median(runs.map((m) => m.rps)),
  p50: median(runs.map((m) => m.p50)),
  p99: median(runs.map((m) => m.p99)),
  cpuUs: median(runs.map((m) => m.cpuUs)),
  errors: runs.reduce((sum, m) => sum + m.errors, 0),
});
const gw = summarise(measured.gateway);
const ha = summarise(measured.haproxy);
const direct = summarise(measured.direct);
const gwPaced = summarise(paced.gateway);
const haPaced = summarise(paced.haproxy);
const directPaced = summarise(paced.direct);
const ms = (value: number) => `${value.toFixed(1)} ms`;
const signed = (value: number) => `${value >= 0 ? '+' : ''}${value.toFixed(1)} ms`;
const rows: BenchRow[] = [
  {
    benchmark: `req/s, ${UNITS} busybox units, ${CONNECTIONS} connections (median of ${ROUNDS} x ${DURATION_S} s)`,
    platform: gw.rps.toFixed(0),
    reference: `${ha.rps.toFixed(0)} (HAProxy 2.6)`,
    ratio: `${(gw.rps / ha.rps).toFixed(2)}x`,
    target: '>= 0.7x',
  },
  { benchmark: 'req/s, one unit hit directly', platform: gw.rps.toFixed(0), reference: `${direct.rps.toFixed(0)} (direct)`, ratio: `${(gw.rps / direct.rps).toFixed(2)}x`, target: '-' },
  { benchmark: `p50 latency at full load`, platform: ms(gw.p50), reference: `${ms(ha.p50)} HAProxy, ${ms(direct.p50)} direct`, ratio: signed(gw.p50 - ha.p50), target: '-' },
  { benchmark: `p99 latency at full load`, platform: ms(gw.p99), reference: `${ms(ha.p99)} HAProxy, ${ms(direct.p99)} direct`, ratio: signed(gw.p99 - ha.p99), target: '-' },
  {
    benchmark: `p50 latency at ${FIXED_RATE} req/s`,
    platform: ms(gwPaced.p50),
    reference: `${ms(haPaced.p50)} HAProxy, ${ms(directPaced.p50)} direct`,
    ratio: `${signed(gwPaced.p50 - directPaced.p50)} vs direct`,
    target: '-',
  },
  {
    benchmark: `p99 latency at ${FIXED_RATE} req/s`,
    platform: ms(gwPaced.p99),
    reference: `${ms(haPaced.p99)} HAProxy, ${ms(directPaced.p99)} direct`,
    ratio: `${signed(gwPaced.p99 - directPaced.p99)} vs direct, ${signed(gwPaced.p99 - haPaced.p99)} vs HAProxy`,
    target: '<= +2 ms',
  },
  { benchmark: 'proxy CPU time per request', platform: `${gw.cpuUs.toFixed(0)} us`, reference: `${ha.cpuUs.toFixed(0)} us (HAProxy)`, ratio: `${(gw.cpuUs / ha.cpuUs).toFixed(2)}x`, target: '-' },
  {
    benchmark: 'failed requests (errors, timeouts, non-2xx)',
    platform: String(gw.errors + gwPaced.errors),
    reference: `${ha.errors + haPaced.errors} HAProxy, ${direct.errors + directPaced.errors} direct`,
    ratio: '-',
    target: '0',
  },
];
printTable(rows);

haproxy.kill('SIGTERM');
process.removeListener('exit', killHaproxy);
rmSync(haproxyDir, { recursive: true, force: true });
await platform.stop();
