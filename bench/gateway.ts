import { randomBytes } from 'node:crypto';
import autocannon from 'autocannon';
import { buildTestImage } from '../test/harness/test-image.js';
import { http } from '../test/harness/platform.js';
import { waitFor } from '../test/harness/wait.js';
import { median, printTable, type BenchRow } from './table.js';
import { startBenchPlatform } from './bench-platform.js';
import { pacedLoad } from './paced-load.js';
import { dataPlaneConfig, printConfigurations, startReferenceHaproxy } from './reference-haproxy.js';
import { cpuTicks, cpuUsPerRequest, haproxyWorkers } from './proxy-cpu.js';
import { measureConvergence } from './route-convergence.js';
import { startGateway, type DataPlaneName, type Gateway } from '../test/harness/gateway-cluster.js';
import { openStore } from '../src/store/open-store.js';

// Issues 6 and 16: requests per second and latency through the gateway's two data planes (HAProxy
// driven by the gateway, and the Node proxy), against a hand-written HAProxy 2.6 configuration
// (Debian's haproxy) balancing the same units round robin with keep-alive, and against one unit
// hit directly: same concurrency, same run, in alternating rounds. Then route convergence on both
// data planes (bench/route-convergence.ts). The units are real containers
// run by the platform, of two kinds: the test image's Node server, which keeps connections alive
// as nearly every real service does, and its busybox httpd, which closes the connection after
// every response (so every proxied request opens a new upstream connection). Also the CPU time
// each proxy process spends per request (from /proc), which decides throughput on a small machine.
// Also, for throughput and CPU only, a hand-written haproxy.cfg with the gateway's balancing and
// retry policy (GATEWAY_POLICY): what those two behaviours cost HAProxy itself, apart from the
// generated configuration's rules (docs/gateway.md, "Where the HAProxy plane's CPU time goes").

const UNITS = 3;
const CONNECTIONS = 32;
const DURATION_S = 8;
const ROUNDS = 3;
/** Offered load for the latency comparison: well below every target's capacity, so no queueing. */
const FIXED_RATE = 200;
const PACED_CONNECTIONS = 8;

type UnitKind = 'keep-alive' | 'busybox';
const unitKinds: UnitKind[] = ['keep-alive', 'busybox'];
const describeUnits: Record<UnitKind, string> = {
  'keep-alive': `${UNITS} keep-alive units (Node)`,
  busybox: `${UNITS} busybox units (close per response)`,
};

const CONVERGENCE_CHANGES = 200;

/**
 * The gateway's backend policy (haproxy-config.ts backendSection), hand-written: least outstanding
 * requests, and one retry of an idempotent request whose reused connection the unit closed (an
 * L7 retry, for which HAProxy copies every request into a buffer).
 */
const GATEWAY_POLICY = ['balance leastconn', 'retries 1', 'option redispatch 1', 'retry-on conn-failure empty-response', 'http-request disable-l7-retry unless { method GET HEAD OPTIONS PUT DELETE }'];

const platform = await startBenchPlatform(['directory', 'scheduler', 'agent'], 'bench-gateway');
const { engine, registry } = platform;
const planes: Record<DataPlaneName, Gateway> = {
  haproxy: await startGateway('haproxy', ['--etcd', platform.etcd.url]),
  node: await startGateway('node', ['--etcd', platform.etcd.url]),
};

interface Measure {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  /** CPU time of the proxy process per request, in microseconds (0 for direct). */
  cpuUs: number;
}

type Target = 'haproxyPlane' | 'nodePlane' | 'haproxy' | 'haproxyPolicy' | 'direct';
type Targets = Record<Target, { url: string; host?: string; pids?: number[] }>;

/** Full load: as many requests as `CONNECTIONS` keep-alive connections carry, with autocannon. */
async function load(target: Targets[Target], duration = DURATION_S): Promise<Measure> {
  const { url, host, pids } = target;
  const before = pids === undefined ? 0 : cpuTicks(pids);
  const result = await autocannon({ url, duration, connections: CONNECTIONS, ...(host ? { headers: { host } } : {}) });
  const ticks = pids === undefined ? 0 : cpuTicks(pids) - before;
  return {
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: result.errors + result.timeouts + result.non2xx,
    cpuUs: cpuUsPerRequest(ticks, result.requests.total),
  };
}

/** A fixed low rate, timed open loop with a sub-millisecond clock (see paced-load.ts). */
async function paced(target: Targets[Target]): Promise<Measure> {
  const { url, host } = target;
  const result = await pacedLoad({ url, ...(host ? { host } : {}), rate: FIXED_RATE, durationMs: DURATION_S * 1000, connections: PACED_CONNECTIONS });
  return { rps: FIXED_RATE, p50: result.p50, p99: result.p99, errors: result.errors, cpuUs: 0 };
}

/** Deploys `UNITS` units of the kind and waits until both gateways route to all of them. */
async function deployUnits(kind: UnitKind): Promise<{ service: string; addresses: string[] }> {
  const repository = `bench/gateway-${kind}`;
  const image = await buildTestImage(engine.docker, registry.host, repository, 'v1', kind === 'keep-alive' ? { variant: 'keep-alive' } : {});
  const service = `bench-${kind}-${randomBytes(2).toString('hex')}`;
  await http('POST', `${platform.url('directory')}/services`, { name: service, containerImage: `${registry.host}/${repository}`, numInstances: UNITS });
  const deploy = await http('POST', `${platform.url('scheduler')}/hooks/deploy`, { serviceName: service, containerRepository: image.reference, pushedAt: 0 });
  if (deploy.status !== 200) throw new Error(`deploy failed: ${JSON.stringify(deploy.body)}`);
  let addresses: string[] = [];
  for (const gateway of Object.values(planes)) {
    addresses = await waitFor(async () => {
      const { routes } = (await http('GET', `${gateway.url}/routes`)).body as { routes: { name: string; upstreams: { address: string }[] }[] };
      const upstreams = routes.find((route) => route.name === service)?.upstreams ?? [];
      return upstreams.length === UNITS ? upstreams.map((upstream) => upstream.address) : undefined;
    }, 120_000, { what: `${UNITS} routable ${kind} units on the ${gateway.plane} data plane` });
  }
  return { service, addresses };
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
  const ready = async (port: number) => (await fetch(`http://127.0.0.1:${port}/`)).ok;
  const haproxy = await startReferenceHaproxy(addresses, '', ready);
  const haproxyPolicy = await startReferenceHaproxy(addresses, '', ready, GATEWAY_POLICY);
  const host = `${service}.platform.internal`;
  const targets: Targets = {
    haproxyPlane: { url: `${planes.haproxy.url}/`, host, pids: haproxyWorkers(planes.haproxy) },
    nodePlane: { url: `${planes.node.url}/`, host, pids: [planes.node.child.pid!] },
    haproxy: { url: `http://127.0.0.1:${haproxy.port}/`, pids: [haproxy.pid] },
    haproxyPolicy: { url: `http://127.0.0.1:${haproxyPolicy.port}/`, pids: [haproxyPolicy.pid] },
    direct: { url: `http://${addresses[0]}/` },
  };
  const names = Object.keys(targets) as Target[];
  for (const name of names) await load(targets[name], 2); // warm-up: JIT, pools, page cache
  const measured: Record<Target, Measure[]> = { haproxyPlane: [], nodePlane: [], haproxy: [], haproxyPolicy: [], direct: [] };
  const pacedRuns: Record<Target, Measure[]> = { haproxyPlane: [], nodePlane: [], haproxy: [], haproxyPolicy: [], direct: [] };
  for (let round = 0; round < ROUNDS; round++) {
    for (const name of names) measured[name].push(await load(targets[name]));
    for (const name of names) if (name !== 'haproxyPolicy') pacedRuns[name].push(await paced(targets[name]));
  }
  printConfigurations({
    [`HAProxy data plane (${kind} units)`]: dataPlaneConfig(planes.haproxy.dataDir, planes.haproxy.port),
    'hand-written haproxy.cfg (the target\'s reference)': haproxy.config,
    'hand-written, gateway policy (for comparison)': haproxyPolicy.config,
  });
  haproxy.stop();
  haproxyPolicy.stop();
  await http('DELETE', `${platform.url('directory')}/services/${service}`);

  const ha = summarise(measured.haproxy);
  const policy = summarise(measured.haproxyPolicy);
  const direct = summarise(measured.direct);
  const haPaced = summarise(pacedRuns.haproxy);
  const directPaced = summarise(pacedRuns.direct);
  const units = describeUnits[kind];
  const rows: BenchRow[] = [];
  for (const [plane, target, label] of [
    ['haproxy', 'haproxyPlane', 'gateway, HAProxy data plane'],
    ['node', 'nodePlane', 'gateway, Node data plane'],
  ] as const) {
    const gw = summarise(measured[target]);
    const gwPaced = summarise(pacedRuns[target]);
    const haproxyPlane = plane === 'haproxy';
    rows.push(
      {
        benchmark: `req/s, ${label}, ${units}, ${CONNECTIONS} connections (median of ${ROUNDS} x ${DURATION_S} s)`,
        platform: gw.rps.toFixed(0),
        reference: `${ha.rps.toFixed(0)} (hand-written haproxy.cfg), ${direct.rps.toFixed(0)} direct`,
        ratio: `${(gw.rps / ha.rps).toFixed(2)}x`,
        target: haproxyPlane ? '>= 0.95x' : '-',
      },
      { benchmark: `p50 / p99 latency at full load, ${label}, ${units}`, platform: `${ms(gw.p50)} / ${ms(gw.p99)}`, reference: `${ms(ha.p50)} / ${ms(ha.p99)} hand-written`, ratio: `${signed(gw.p99 - ha.p99)} p99`, target: haproxyPlane ? '<= +0.2 ms p99' : '-' },
      {
        benchmark: `p50 / p99 latency at ${FIXED_RATE} req/s, ${label}, ${units}`,
        platform: `${ms(gwPaced.p50)} / ${ms(gwPaced.p99)}`,
        reference: `${ms(haPaced.p50)} / ${ms(haPaced.p99)} hand-written, ${ms(directPaced.p99)} p99 direct`,
        ratio: `${signed(gwPaced.p99 - haPaced.p99)} p99 vs hand-written`,
        target: haproxyPlane ? '<= +0.2 ms p99' : '-',
      },
      { benchmark: `proxy CPU time per request, ${label}, ${units}`, platform: `${gw.cpuUs.toFixed(0)} us`, reference: `${ha.cpuUs.toFixed(0)} us (hand-written)`, ratio: `${(gw.cpuUs / ha.cpuUs).toFixed(2)}x`, target: '-' },
      ...(haproxyPlane
        ? [
            {
              benchmark: `req/s and CPU per request against a hand-written haproxy.cfg with the gateway's balancing and retries (leastconn, L7 retry), ${units}`,
              platform: `${gw.rps.toFixed(0)}, ${gw.cpuUs.toFixed(0)} us`,
              reference: `${policy.rps.toFixed(0)}, ${policy.cpuUs.toFixed(0)} us (hand-written, gateway policy)`,
              ratio: `${(gw.rps / policy.rps).toFixed(2)}x`,
              target: 'for comparison',
            },
          ]
        : []),
      { benchmark: `failed requests (errors, timeouts, non-2xx), ${label}, ${units}`, platform: String(gw.errors + gwPaced.errors), reference: `${ha.errors + haPaced.errors} hand-written, ${policy.errors} with the gateway policy, ${direct.errors + directPaced.errors} direct`, ratio: '-', target: '0' },
    );
  }
  return rows;
}

const percentile = (values: number[], p: number): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
};

async function measureConvergenceRows(): Promise<BenchRow[]> {
  const store = await openStore({ etcd: [platform.etcd.url], dataDir: '' });
  const rows: BenchRow[] = [];
  try {
    for (const gateway of Object.values(planes)) {
      const { up, down } = await measureConvergence(store, gateway.port, `converge-${gateway.plane}`, CONVERGENCE_CHANGES);
      for (const [what, values] of [
        ['status write -> first routed request', up],
        ['deactivating write -> last new request', down],
      ] as const) {
        rows.push({
          benchmark: `route convergence, ${gateway.plane} data plane: ${what} (${values.length} changes)`,
          platform: `p50 ${ms(percentile(values, 50))}, p99 ${ms(percentile(values, 99))}`,
          reference: '-',
          ratio: '-',
          target: 'p99 <= 50 ms',
        });
      }
    }
  } finally {
    await store.close();
  }
  return rows;
}

const args = process.argv.slice(2);
const kinds = args.filter((arg): arg is UnitKind => (unitKinds as string[]).includes(arg));
const rows: BenchRow[] = [];
if (!args.includes('convergence') || kinds.length > 0) for (const kind of kinds.length > 0 ? kinds : unitKinds) rows.push(...(await measureUnits(kind)));
if (args.includes('convergence') || args.length === 0) rows.push(...(await measureConvergenceRows()));
printTable(rows);
await Promise.all(Object.values(planes).map((gateway) => gateway.stop()));
await platform.stop();
