import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { request } from 'undici';
import { buildTestImage } from '../test/harness/test-image.js';
import { http } from '../test/harness/platform.js';
import { waitFor } from '../test/harness/wait.js';
import { countArgument, median, pairedRatio, printTable, type BenchRow } from './table.js';
import { startBenchPlatform } from './bench-platform.js';
import { pacedLoad, type PacedResult } from './paced-load.js';
import { startGeneratedHaproxy } from './generated-haproxy.js';
import { serverCounts, sessionsBetween } from './unit-spread.js';
import { countersBetween, tcpCounters, type TcpCounters } from './tcp-counters.js';
import { GATEWAY_POLICY, L7_RETRY, dataPlaneConfig, printConfigurations, startReferenceHaproxy, type ReferenceHaproxy } from './reference-haproxy.js';
import { cpuTicks, cpuUsPerRequest, haproxyWorkers } from './proxy-cpu.js';
import { convergenceRows } from './route-convergence.js';
import { startGateway, type DataPlaneName, type Gateway } from '../test/harness/gateway-cluster.js';
import { openStore } from '../src/store/open-store.js';
import { gatewayTimedRequests, startLineCounter, udpReceiveBufferErrors, type LineCounter } from './traffic-log-lines.js';
import { TRAFFIC_LOG_SAMPLE_EVERY } from '../src/roles/gateway/haproxy-traffic-log.js';
import { COUNTERS_COMMAND } from '../src/roles/gateway/haproxy-traffic-counters.js';
import { runtimeCommand } from '../src/roles/gateway/haproxy-runtime.js';

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
// The latency target is compared at a fixed rate with every target paced in the same window
// (paced-load.ts). `tail` (busybox units only) takes the full-load tail apart: the plane, its
// generated configuration run by hand (a backend copy per thread, as the plane, and one backend
// shared by the threads: what the plane's process adds, and what the copies add), and hand-written configurations
// adding the gateway's balancing and retry one at a time, with how requests spread over the units
// and how often a unit's accept queue overflowed (docs/benchmarks.md, issue 16). `traffic-log`
// (keep-alive units) measures what the HAProxy plane's traffic figures cost: the generated
// configuration by hand with no figures at all, with the old line per request, and with the
// figures as the plane gathers them now (a latency line for one request in
// TRAFFIC_LOG_SAMPLE_EVERY, and its counters read once per --metrics-interval), the plane and the
// reference in the same rounds, and how many lines arrive (docs/benchmarks.md, issue 31).

const UNITS = 3;
const CONNECTIONS = 32;
const DURATION_S = 8;
/** Offered load per target for the latency comparison: well below every target's capacity, so no queueing. */
const FIXED_RATE = 200;
const PACED_CONNECTIONS = 8;
/** Paced rounds, all paced targets in each (paced-load.ts): a p99 difference per round, and their spread. */
const PACED_ROUNDS = 5;
const PACED_S = 10;

type UnitKind = 'keep-alive' | 'busybox';
const unitKinds: UnitKind[] = ['keep-alive', 'busybox'];
const describeUnits: Record<UnitKind, string> = {
  'keep-alive': `${UNITS} keep-alive units (Node)`,
  busybox: `${UNITS} busybox units (close per response)`,
};

const CONVERGENCE_CHANGES = 200;

/** The hand-written configurations' backend lines: the reference, the gateway's policy, and each half of it. */
const HAND_WRITTEN = {
  haproxy: ['balance roundrobin'],
  haproxyPolicy: GATEWAY_POLICY,
  haproxyRetry: ['balance roundrobin', ...L7_RETRY],
  haproxyLeastconn: ['balance leastconn'],
} as const;
type HandWritten = keyof typeof HAND_WRITTEN;

// Sections: `keep-alive`, `busybox`, `tail`, `convergence`, `traffic-log`; none named: keep-alive, busybox and convergence.
// `--rounds=N`: full-load rounds per unit kind (3 by default, each target 8 s a round).
const roundsFlag = process.argv.slice(2).find((arg) => arg.startsWith('--rounds='));
const ROUNDS = countArgument(roundsFlag?.slice('--rounds='.length), '--rounds', 3);
const args = process.argv.slice(2).filter((arg) => arg !== roundsFlag);
const unknown = args.filter((arg) => ![...unitKinds, 'tail', 'convergence', 'traffic-log'].includes(arg));
if (unknown.length > 0) throw new Error(`unknown section ${unknown.join(', ')}: keep-alive, busybox, tail, convergence or traffic-log`);
const kinds = args.length === 0 ? unitKinds : unitKinds.filter((kind) => args.includes(kind));

// Every HAProxy the bench starts kills itself on exit (reference-haproxy.ts): the tail section runs seven.
process.setMaxListeners(20);

const platform = await startBenchPlatform(['directory', 'scheduler', 'agent'], 'bench-gateway');
const { engine, registry } = platform;
const planes: Record<DataPlaneName, Gateway> = {
  haproxy: await startGateway('haproxy', ['--etcd', platform.etcd.url]),
  node: await startGateway('node', ['--etcd', platform.etcd.url]),
};

interface Measure {
  rps: number;
  mean: number;
  p50: number;
  p99: number;
  p99_9: number;
  max: number;
  errors: number;
  /** Requests answered. */
  requests: number;
  /** CPU time of the proxy process per request, in microseconds (0 for direct). */
  cpuUs: number;
  /** Requests each unit got, from HAProxy's counters (HAProxy targets only). */
  perUnit?: number[];
  /** Handshakes dropped on a full accept queue, and SYNs sent again, during the round (the whole machine's). */
  tcp: TcpCounters;
}

/**
 * What is measured: the two planes; the hand-written configurations (HAND_WRITTEN); the gateway's
 * generated configuration run by hand with one backend shared by the threads; one unit directly.
 */
type Target = 'haproxyPlane' | 'nodePlane' | HandWritten | 'generated' | 'generatedLogged' | 'generatedSampled' | 'generatedShared' | 'direct';
type Targets = Partial<Record<Target, { url: string; host?: string; pids?: number[]; socket?: string }>>;
const targetLabels: Record<Target, string> = {
  haproxyPlane: 'HAProxy plane',
  nodePlane: 'Node plane',
  haproxy: 'hand-written, round robin (reference)',
  haproxyPolicy: 'hand-written, gateway policy (leastconn, L7 retry), one backend',
  haproxyRetry: 'hand-written, round robin, L7 retry',
  haproxyLeastconn: 'hand-written, leastconn, no L7 retry',
  generated: 'generated config by hand, a backend copy per thread (as the plane)',
  generatedLogged: 'generated config by hand with a traffic log line per request (the plane before)',
  generatedSampled: `generated config by hand with its counters read and 1 in ${TRAFFIC_LOG_SAMPLE_EVERY} requests logged (as the plane)`,
  generatedShared: 'generated config by hand, one backend shared by the threads',
  direct: 'direct to one unit',
};
/** The targets of the main sections: full load, then paced (the first paced one is compared with the reference). */
const unitTargets: Target[] = ['haproxyPlane', 'nodePlane', 'haproxy', 'haproxyPolicy', 'direct'];
const pacedTargets: Target[] = ['haproxyPlane', 'haproxy', 'nodePlane', 'direct'];
/** The `tail` section's targets (busybox units). */
const tailTargets: Target[] = ['haproxyPlane', 'generated', 'generatedShared', 'haproxy', 'haproxyRetry', 'haproxyLeastconn', 'haproxyPolicy'];
const TAIL_ROUNDS = 5;
const TAIL_DURATION_S = 6;
/**
 * The tail at a fixed rate instead (open loop: a request stuck in a unit's full accept queue does
 * not hold back the next), all in one window: each target's share is well within what three
 * busybox units serve on this machine.
 */
const tailPacedTargets: Target[] = ['haproxyPlane', 'generated', 'generatedShared', 'haproxy', 'haproxyPolicy'];
const TAIL_RATE = 300;
const TAIL_PACED_CONNECTIONS = 16;
const TAIL_PACED_ROUNDS = 3;
/**
 * Then keep-alive units at the target's 200 req/s, in one window: the plane against the same
 * generated configuration run by hand (what the gateway's driving adds), with one shared backend
 * (what the copies add), the gateway's policy hand-written and the reference.
 */
const lowRateTargets: Target[] = ['haproxyPlane', 'generated', 'generatedShared', 'haproxyPolicy', 'haproxy'];
/** The `traffic-log` section: the generated configuration with no traffic figures, the old line per request and the plane's figures; the plane; the reference. */
const trafficLogTargets: Target[] = ['generatedLogged', 'generated', 'generatedSampled', 'haproxyPlane', 'haproxy'];
/** How often the plane reads HAProxy's counters by default (--metrics-interval). */
const COUNTERS_INTERVAL_MS = 10_000;
const TRAFFIC_LOG_ROUNDS = 5;

type TargetSpec = NonNullable<Targets[Target]>;

/** Full load: as many requests as `CONNECTIONS` keep-alive connections carry, with autocannon. */
async function load(target: TargetSpec, addresses: string[], duration = DURATION_S): Promise<Measure> {
  const { url, host, pids, socket } = target;
  const before = pids === undefined ? 0 : cpuTicks(pids);
  const countsBefore = socket === undefined ? [] : await serverCounts(socket, addresses);
  const tcpBefore = tcpCounters();
  const result = await autocannon({ url, duration, connections: CONNECTIONS, ...(host ? { headers: { host } } : {}) });
  const ticks = pids === undefined ? 0 : cpuTicks(pids) - before;
  const tcp = countersBetween(tcpBefore, tcpCounters());
  return {
    tcp,
    rps: result.requests.average,
    mean: result.latency.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    p99_9: result.latency.p99_9,
    max: result.latency.max,
    errors: result.errors + result.timeouts + result.non2xx,
    requests: result.requests.total,
    cpuUs: cpuUsPerRequest(ticks, result.requests.total),
    ...(socket === undefined ? {} : { perUnit: sessionsBetween(countsBefore, await serverCounts(socket, addresses), addresses) }),
  };
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
  mean: median(runs.map((m) => m.mean)),
  p50: median(runs.map((m) => m.p50)),
  p99: median(runs.map((m) => m.p99)),
  p99_9: median(runs.map((m) => m.p99_9)),
  max: Math.max(...runs.map((m) => m.max)),
  cpuUs: median(runs.map((m) => m.cpuUs)),
  errors: runs.reduce((sum, m) => sum + m.errors, 0),
  perUnit: runs.reduce<number[]>((sum, m) => (m.perUnit ?? []).map((n, i) => n + (sum[i] ?? 0)), []),
  listenOverflows: runs.reduce((sum, m) => sum + m.tcp.listenOverflows, 0),
  synRetransmits: runs.reduce((sum, m) => sum + m.tcp.synRetransmits, 0),
});
const ms = (value: number) => `${value.toFixed(2)} ms`;
const signed = (value: number) => `${value >= 0 ? '+' : ''}${value.toFixed(2)} ms`;
const shares = (perUnit: number[]): string => {
  const total = perUnit.reduce((sum, n) => sum + n, 0);
  return perUnit.map((n) => `${total > 0 ? ((100 * n) / total).toFixed(0) : '-'} %`).join(' / ');
};
const fullLoadLine = (m: Measure): string =>
  `p99 ${m.p99} / p99.9 ${m.p99_9} / max ${m.max} ms, ${m.rps.toFixed(0)} req/s${m.cpuUs > 0 ? `, CPU ${m.cpuUs.toFixed(0)} us a request` : ''}${m.perUnit ? `, units ${shares(m.perUnit)}` : ''}, ${m.tcp.listenOverflows} listen overflows, ${m.tcp.synRetransmits} SYN retransmits`;

/** Paced rounds, every one of `names` in each: per target its results, round by round. */
async function pacedRounds(targets: Targets, names = pacedTargets, rate = FIXED_RATE, connections = PACED_CONNECTIONS, rounds = PACED_ROUNDS): Promise<Record<Target, PacedResult[]>> {
  const runs = Object.fromEntries(names.map((name) => [name, [] as PacedResult[]])) as Record<Target, PacedResult[]>;
  for (let round = 0; round < rounds; round++) {
    const results = await pacedLoad(
      names.map((name) => targets[name]!),
      { rate, durationMs: PACED_S * 1000, connections },
    );
    results.forEach((result, i) => runs[names[i]!].push(result));
    const line = (result: PacedResult) => `p99 ${ms(result.p99)}, p99.9 ${ms(result.p99_9)}, max ${ms(result.max)}`;
    console.log(`paced round ${round + 1} at ${rate} req/s each: ${names.map((name, i) => `${targetLabels[name]} ${line(results[i]!)}`).join('; ')}`);
  }
  return runs;
}

/** A paced row's comparison: the p99 difference to the reference in each round, their median and range. */
function pacedDifference(runs: PacedResult[], reference: PacedResult[]): string {
  const differences = runs.map((run, i) => run.p99 - reference[i]!.p99);
  return `${signed(median(differences))} p99 (median of ${differences.length} rounds, ${signed(Math.min(...differences))} to ${signed(Math.max(...differences))})`;
}

/** Starts the targets named for the service's units (the planes already run); `stop` ends those it started. */
async function startTargets(service: string, addresses: string[], names: readonly Target[]): Promise<{ targets: Targets; configs: Record<string, string>; lines: LineCounter; stop(): void }> {
  const host = `${service}.platform.internal`;
  // undici's request, not fetch: fetch sends its own Host.
  const ready = async (port: number) => {
    const { statusCode, body } = await request(`http://127.0.0.1:${port}/`, { headers: { host } });
    await body.dump();
    return statusCode === 200;
  };
  const started: ReferenceHaproxy[] = [];
  // Where the generated configurations' lines go, counted as the gateway would receive them (one target is loaded at a time).
  const lines = await startLineCounter();
  const targets: Targets = {};
  const configs: Record<string, string> = { 'HAProxy data plane': dataPlaneConfig(planes.haproxy.dataDir, planes.haproxy.port) };
  for (const name of names) {
    if (name === 'haproxyPlane') {
      targets[name] = { url: `${planes.haproxy.url}/`, host, pids: haproxyWorkers(planes.haproxy), socket: join(planes.haproxy.dataDir, `gateway-${planes.haproxy.port}`, 'runtime.sock') };
    } else if (name === 'nodePlane') {
      targets[name] = { url: `${planes.node.url}/`, host, pids: [planes.node.child.pid!] };
    } else if (name === 'direct') {
      targets[name] = { url: `http://${addresses[0]}/` };
    } else {
      const trafficLog = name === 'generatedLogged' ? { port: lines.port, sampleEvery: 1 } : name === 'generatedSampled' ? { port: lines.port, sampleEvery: TRAFFIC_LOG_SAMPLE_EVERY } : undefined;
      const haproxy = await (name === 'generated' || name === 'generatedLogged' || name === 'generatedSampled' || name === 'generatedShared'
        ? startGeneratedHaproxy(service, host, addresses, name === 'generatedShared' ? 'shared' : 'per-thread', ready, trafficLog)
        : startReferenceHaproxy(addresses, '', ready, HAND_WRITTEN[name]));
      started.push(haproxy);
      configs[targetLabels[name]] = haproxy.config;
      targets[name] = { url: `http://127.0.0.1:${haproxy.port}/`, host, pids: [haproxy.pid], socket: haproxy.socket };
    }
  }
  return {
    targets,
    configs,
    lines,
    stop: () => {
      started.forEach((haproxy) => haproxy.stop());
      lines.close();
    },
  };
}

/** Full-load rounds over `names`, each round starting one target later (none always right after the same one). */
async function fullLoadRounds(kind: UnitKind, targets: Targets, names: readonly Target[], addresses: string[], rounds: number, duration: number): Promise<Record<Target, Measure[]>> {
  for (const name of names) await load(targets[name]!, addresses, 2); // warm-up: JIT, pools, page cache
  const measured = Object.fromEntries(names.map((name) => [name, [] as Measure[]])) as Record<Target, Measure[]>;
  for (let round = 0; round < rounds; round++) {
    for (const name of names.map((_, i) => names[(i + round) % names.length]!)) {
      const measure = await load(targets[name]!, addresses, duration);
      measured[name].push(measure);
      console.log(`${kind}, full-load round ${round + 1}, ${targetLabels[name]}: ${fullLoadLine(measure)}`);
    }
  }
  return measured;
}

/** The most requests that ever waited in a server's queue, per HAProxy target. */
const mostQueued = async (targets: Targets, names: readonly Target[], addresses: string[]): Promise<number[]> =>
  Promise.all(names.map(async (name) => Math.max(0, ...(await serverCounts(targets[name]!.socket!, addresses)).map((count) => count.queuedMax))));

/** A full-load tail row per HAProxy target: where a p99 comes from (docs/benchmarks.md, issue 16). */
function tailRows(measured: Record<Target, Measure[]>, names: readonly Target[], queued: number[], units: string, rounds: number, duration: number): BenchRow[] {
  return names.map((name, i) => {
    const m = summarise(measured[name]);
    return {
      benchmark: `full-load tail, ${targetLabels[name]}, ${units}: req/s; mean / p50 / p99 / p99.9 (medians) / max of ${rounds} x ${duration} s; requests per unit; most queued; listen overflows / SYN retransmits a second`,
      platform: `${m.rps.toFixed(0)}; ${m.mean.toFixed(1)} / ${m.p50} / ${m.p99} / ${m.p99_9} / ${m.max} ms; ${shares(m.perUnit)}; ${queued[i]}; ${(m.listenOverflows / (rounds * duration)).toFixed(1)} / ${(m.synRetransmits / (rounds * duration)).toFixed(1)}`,
      reference: '-',
      ratio: '-',
      target: 'for diagnosis',
    };
  });
}

async function measureUnits(kind: UnitKind): Promise<BenchRow[]> {
  const { service, addresses } = await deployUnits(kind);
  const { targets, configs, stop } = await startTargets(service, addresses, unitTargets);
  const measured = await fullLoadRounds(kind, targets, unitTargets, addresses, ROUNDS, DURATION_S);
  const pacedRuns = await pacedRounds(targets);
  const haproxyNames = unitTargets.filter((name) => targets[name]!.socket !== undefined);
  const queued = await mostQueued(targets, haproxyNames, addresses);
  printConfigurations(configs, 'plain HTTP');
  stop();
  await http('DELETE', `${platform.url('directory')}/services/${service}`);

  const ha = summarise(measured.haproxy);
  const policy = summarise(measured.haproxyPolicy);
  const direct = summarise(measured.direct);
  const pacedMedian = (name: Target) => ({ p50: median(pacedRuns[name].map((r) => r.p50)), p99: median(pacedRuns[name].map((r) => r.p99)), errors: pacedRuns[name].reduce((sum, r) => sum + r.errors, 0) });
  const haPaced = pacedMedian('haproxy');
  const directPaced = pacedMedian('direct');
  const units = describeUnits[kind];
  const rows: BenchRow[] = [];
  for (const [plane, target, label] of [
    ['haproxy', 'haproxyPlane', 'gateway, HAProxy data plane'],
    ['node', 'nodePlane', 'gateway, Node data plane'],
  ] as const) {
    const gw = summarise(measured[target]);
    const gwPaced = pacedMedian(target);
    const haproxyPlane = plane === 'haproxy';
    rows.push(
      {
        benchmark: `req/s, ${label}, ${units}, ${CONNECTIONS} connections (median of ${ROUNDS} x ${DURATION_S} s)`,
        platform: gw.rps.toFixed(0),
        reference: `${ha.rps.toFixed(0)} (hand-written haproxy.cfg), ${direct.rps.toFixed(0)} direct`,
        // Each round measures every target, so a round's own ratio pairs the two in one stretch of the machine's load.
        ratio: `${(gw.rps / ha.rps).toFixed(2)}x; rounds' own: ${pairedRatio(measured[target].map((m) => m.rps), measured.haproxy.map((m) => m.rps))}`,
        target: haproxyPlane ? '>= 0.95x' : '-',
      },
      // Closed loop: with busybox units the reference's connections stuck in 1 s SYN retries leave its
      // others a lighter machine (docs/benchmarks.md, issue 16), so the p99 target is the paced row's.
      { benchmark: `p50 / p99 latency at full load (closed loop), ${label}, ${units}`, platform: `${ms(gw.p50)} / ${ms(gw.p99)}`, reference: `${ms(ha.p50)} / ${ms(ha.p99)} hand-written`, ratio: `${signed(gw.p99 - ha.p99)} p99`, target: haproxyPlane ? 'see the paced row' : '-' },
      {
        benchmark: `p50 / p99 latency at ${FIXED_RATE} req/s each, same window, ${label}, ${units} (median of ${PACED_ROUNDS} x ${PACED_S} s)`,
        platform: `${ms(gwPaced.p50)} / ${ms(gwPaced.p99)}`,
        reference: `${ms(haPaced.p50)} / ${ms(haPaced.p99)} hand-written, ${ms(directPaced.p99)} p99 direct`,
        ratio: pacedDifference(pacedRuns[target], pacedRuns.haproxy),
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
  rows.push(...tailRows(measured, haproxyNames, queued, units, ROUNDS, DURATION_S));
  return rows;
}

/** The `tail` section: the busybox full-load tail, configuration by configuration. */
async function measureTail(): Promise<BenchRow[]> {
  const { service, addresses } = await deployUnits('busybox');
  const { targets, configs, stop } = await startTargets(service, addresses, [...new Set([...tailTargets, ...tailPacedTargets])]);
  const measured = await fullLoadRounds('busybox', targets, tailTargets, addresses, TAIL_ROUNDS, TAIL_DURATION_S);
  const tcpBefore = tcpCounters();
  const paced = await pacedRounds(targets, tailPacedTargets, TAIL_RATE, TAIL_PACED_CONNECTIONS, TAIL_PACED_ROUNDS);
  const pacedTcp = countersBetween(tcpBefore, tcpCounters());
  const queued = await mostQueued(targets, tailTargets, addresses);
  printConfigurations(configs, 'plain HTTP');
  stop();
  await http('DELETE', `${platform.url('directory')}/services/${service}`);
  const rows = tailRows(measured, tailTargets, queued, describeUnits.busybox, TAIL_ROUNDS, TAIL_DURATION_S);
  rows.push(...pacedTailRows(paced, tailPacedTargets, TAIL_RATE, TAIL_PACED_ROUNDS, describeUnits.busybox, pacedTcp));
  rows.push(...(await lowRateRows()));
  return rows;
}

/** The `tail` section's last part: keep-alive units at 200 req/s, lowRateTargets in one window. */
async function lowRateRows(): Promise<BenchRow[]> {
  const { service, addresses } = await deployUnits('keep-alive');
  const { targets, stop } = await startTargets(service, addresses, lowRateTargets);
  const tcpBefore = tcpCounters();
  const paced = await pacedRounds(targets, lowRateTargets);
  const tcp = countersBetween(tcpBefore, tcpCounters());
  stop();
  await http('DELETE', `${platform.url('directory')}/services/${service}`);
  return pacedTailRows(paced, lowRateTargets, FIXED_RATE, PACED_ROUNDS, describeUnits['keep-alive'], tcp);
}

/** Paced rows of the `tail` section, each configuration against the reference in the same window. */
function pacedTailRows(paced: Record<Target, PacedResult[]>, names: readonly Target[], rate: number, rounds: number, units: string, tcp: TcpCounters): BenchRow[] {
  const rows: BenchRow[] = [];
  const pacedMedian = (name: Target, key: 'p50' | 'p99' | 'p99_9') => median(paced[name].map((run) => run[key]));
  for (const name of names) {
    rows.push({
      benchmark: `at ${rate} req/s each, same window (open loop), ${targetLabels[name]}, ${units}: p50 / p99 / p99.9 (medians of ${rounds} x ${PACED_S} s) / max`,
      platform: `${ms(pacedMedian(name, 'p50'))} / ${ms(pacedMedian(name, 'p99'))} / ${ms(pacedMedian(name, 'p99_9'))} / ${ms(Math.max(...paced[name].map((run) => run.max)))}`,
      reference: name === 'haproxy' ? '-' : pacedDifference(paced[name], paced.haproxy),
      ratio: name === 'haproxy' ? '-' : `${signed(median(paced[name].map((run, i) => run.p50 - paced.haproxy[i]!.p50)))} p50 (median)`,
      target: `for diagnosis (all paced rounds: ${tcp.listenOverflows} listen overflows, ${tcp.synRetransmits} SYN retransmits)`,
    });
  }
  return rows;
}

/** One full-load round of the `traffic-log` section. */
interface LoggedRound {
  measure: Measure;
  /** Lines that arrived of the round's requests (targets that log them). */
  lines?: number;
  /** The gateway process's CPU per request: on the plane, receiving and counting the lines. */
  gatewayCpuUs: number;
  /** Datagrams the kernel dropped on a full receive buffer during the round (the whole machine's). */
  dropped: number;
}

/** The `traffic-log` section: what the HAProxy plane's traffic figures cost, the old way and the new, and whether the lines arrive, at full load. */
async function measureTrafficLog(): Promise<BenchRow[]> {
  const { service, addresses } = await deployUnits('keep-alive');
  const { targets, lines, stop } = await startTargets(service, addresses, trafficLogTargets);
  const gatewayPid = planes.haproxy.child.pid!;
  // The generated configuration with the plane's figures has its counters read as the plane reads them.
  const counterReads = setInterval(() => void runtimeCommand(targets.generatedSampled!.socket!, COUNTERS_COMMAND).catch(() => undefined), COUNTERS_INTERVAL_MS);
  const runs = Object.fromEntries(trafficLogTargets.map((name) => [name, [] as LoggedRound[]])) as Record<Target, LoggedRound[]>;
  for (let round = 0; round < TRAFFIC_LOG_ROUNDS; round++) {
    for (const name of trafficLogTargets.map((_, i) => trafficLogTargets[(i + round) % trafficLogTargets.length]!)) {
      // The plane's lines: its latency histogram's count, each line observed TRAFFIC_LOG_SAMPLE_EVERY times.
      const planeLines = async () => (await gatewayTimedRequests(planes.haproxy.url, service)) / TRAFFIC_LOG_SAMPLE_EVERY;
      const arrived = name === 'haproxyPlane' ? planeLines : name === 'generatedLogged' || name === 'generatedSampled' ? async () => lines.lines() : undefined;
      const [linesBefore, dropsBefore, gatewayBefore] = [(await arrived?.()) ?? 0, udpReceiveBufferErrors(), cpuTicks([gatewayPid])];
      const measure = await load(targets[name]!, addresses);
      // Lines still in the socket's buffer when the load ends are received meanwhile.
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const linesAfter = (await arrived?.()) ?? 0;
      const logged: LoggedRound = {
        measure,
        ...(arrived ? { lines: linesAfter - linesBefore } : {}),
        gatewayCpuUs: cpuUsPerRequest(cpuTicks([gatewayPid]) - gatewayBefore, measure.requests),
        dropped: udpReceiveBufferErrors() - dropsBefore,
      };
      runs[name].push(logged);
      const lineCount = logged.lines === undefined ? '' : `, ${logged.lines} lines of ${measure.requests} requests`;
      console.log(`traffic log, round ${round + 1}, ${targetLabels[name]}: ${fullLoadLine(measure)}${lineCount}, gateway CPU ${logged.gatewayCpuUs.toFixed(1)} us a request, ${logged.dropped} UDP drops`);
    }
  }
  clearInterval(counterReads);
  stop();
  await http('DELETE', `${platform.url('directory')}/services/${service}`);
  return trafficLogRows(runs);
}

function trafficLogRows(runs: Record<Target, LoggedRound[]>): BenchRow[] {
  const rps = (name: Target) => runs[name].map((run) => run.measure.rps);
  const cpu = (name: Target) => median(runs[name].map((run) => run.measure.cpuUs));
  const gatewayCpu = median(runs.haproxyPlane.map((run) => run.gatewayCpuUs));
  const units = describeUnits['keep-alive'];
  const of = `median of ${TRAFFIC_LOG_ROUNDS} x ${DURATION_S} s, ${CONNECTIONS} connections, ${units}`;
  const arrivedShare = (name: Target, every: number) => {
    const [arrived, sent] = runs[name].reduce(([a, s], run) => [a + (run.lines ?? 0), s + run.measure.requests], [0, 0]);
    return `${arrived} lines of ${sent} requests (${((100 * arrived * every) / sent).toFixed(2)} % of 1 in ${every})`;
  };
  const drops = (name: Target) => runs[name].reduce((sum, run) => sum + run.dropped, 0);
  return [
    {
      benchmark: `req/s, generated config by hand with the plane's figures (counters read every ${COUNTERS_INTERVAL_MS / 1000} s, 1 in ${TRAFFIC_LOG_SAMPLE_EVERY} requests logged) against no figures (${of})`,
      platform: median(rps('generatedSampled')).toFixed(0),
      reference: `${median(rps('generated')).toFixed(0)} no figures, ${median(rps('haproxy')).toFixed(0)} hand-written`,
      ratio: `rounds' own: ${pairedRatio(rps('generatedSampled'), rps('generated'))}`,
      target: '>= 0.97x',
    },
    {
      benchmark: `req/s, generated config by hand with a line per request (the plane before) against no figures (${of})`,
      platform: median(rps('generatedLogged')).toFixed(0),
      reference: `${median(rps('generated')).toFixed(0)} no figures`,
      ratio: `rounds' own: ${pairedRatio(rps('generatedLogged'), rps('generated'))}`,
      target: '-',
    },
    {
      benchmark: `HAProxy CPU per request, generated config: the plane's figures / a line per request, against no figures (${of})`,
      platform: `${cpu('generatedSampled').toFixed(1)} / ${cpu('generatedLogged').toFixed(1)} us`,
      reference: `${cpu('generated').toFixed(1)} us no figures, ${cpu('haproxy').toFixed(1)} us hand-written`,
      ratio: `${(cpu('generatedSampled') / cpu('generated')).toFixed(2)}x / ${(cpu('generatedLogged') / cpu('generated')).toFixed(2)}x`,
      target: '-',
    },
    {
      benchmark: `req/s and CPU per request (HAProxy + the gateway receiving the lines and reading the counters), HAProxy plane against the hand-written reference (${of})`,
      platform: `${median(rps('haproxyPlane')).toFixed(0)}, ${cpu('haproxyPlane').toFixed(1)} + ${gatewayCpu.toFixed(1)} us`,
      reference: `${median(rps('haproxy')).toFixed(0)}, ${cpu('haproxy').toFixed(1)} us`,
      ratio: `rounds' own: ${pairedRatio(rps('haproxyPlane'), rps('haproxy'))}`,
      target: '-',
    },
    {
      benchmark: `traffic log lines that arrived, at full load: HAProxy plane (its latency histogram's count / ${TRAFFIC_LOG_SAMPLE_EVERY}); generated config with the plane's figures; with a line per request (a receiver like the gateway's)`,
      platform: `${arrivedShare('haproxyPlane', TRAFFIC_LOG_SAMPLE_EVERY)}; ${arrivedShare('generatedSampled', TRAFFIC_LOG_SAMPLE_EVERY)}`,
      reference: arrivedShare('generatedLogged', 1),
      ratio: `${drops('haproxyPlane')} / ${drops('generatedSampled')} / ${drops('generatedLogged')} UDP receive-buffer drops`,
      target: '100 %',
    },
  ];
}

async function measureConvergenceRows(): Promise<BenchRow[]> {
  const store = await openStore({ etcd: [platform.etcd.url], dataDir: '' });
  const rows: BenchRow[] = [];
  try {
    for (const gateway of Object.values(planes)) rows.push(...(await convergenceRows(store, gateway.port, gateway.plane, CONVERGENCE_CHANGES)));
  } finally {
    await store.close();
  }
  return rows;
}

const rows: BenchRow[] = [];
for (const kind of kinds) rows.push(...(await measureUnits(kind)));
if (args.includes('tail')) rows.push(...(await measureTail()));
if (args.includes('traffic-log')) rows.push(...(await measureTrafficLog()));
if (args.includes('convergence') || args.length === 0) rows.push(...(await measureConvergenceRows()));
printTable(rows);
await Promise.all(Object.values(planes).map((gateway) => gateway.stop()));
await platform.stop();
