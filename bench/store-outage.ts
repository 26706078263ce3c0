import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { http } from '../test/harness/platform.js';
import { startGatewayCluster } from '../test/harness/gateway-cluster.js';
import { startLoad, type RunningLoad } from '../test/harness/http-load.js';
import { healedAfterReturn, storeAbsences, unitContainers, type StoreAbsence } from '../test/harness/store-outage.js';
import { quantile } from './paced-load.js';
import { countArgument, loadAverage, printTable, type BenchRow } from './table.js';

// Issue 28's store-outage benchmark: a service of 2 units on a real etcd, dockerd and registry,
// a closed-loop load (4 workers, keep-alive and new connections mixed) through each gateway (both
// data planes), and etcd away for SECONDS: stopped and started again on its data directory, then
// frozen (SIGSTOP) and thawed. The load runs from the moment etcd goes until the scheduler has
// healed after the store returned and its renewal grace ended. The reference is the same load for
// the same time with the store up, measured in the same run. Lease TTL 3 s, as the gateway tests.

const SECONDS = countArgument(process.argv[2], 'SECONDS', 60); // `node dist/bench/store-outage.js SECONDS`
const LEASE_TTL_SECONDS = 3;

interface Window {
  requests: number;
  failed: number;
  /** p99 of the answers in the first SECONDS: while the store was away, or the same span of the reference (ms). */
  p99: number;
}

const cluster = await startGatewayCluster();
const { gateways, engine, scheduler } = cluster;
const service = `outage-${randomBytes(2).toString('hex')}`;
const rows: BenchRow[] = [];

/**
 * Runs the load through every gateway while `during` runs, then reports each gateway's window;
 * `during` returns, per gateway, how many of the first answers its p99 counts.
 */
async function measure(during: (loads: RunningLoad[]) => Promise<number[]>): Promise<Window[]> {
  const loads = gateways.map((gateway) => startLoad({ url: `http://127.0.0.1:${gateway.port}/`, host: `${service}.platform.internal`, concurrency: 4, maxDurationMs: SECONDS * 1000 + 300_000 }));
  let counted: number[];
  try {
    counted = await during(loads);
  } catch (error) {
    await Promise.all(loads.map((load) => load.stop()));
    throw error;
  }
  const results = await Promise.all(loads.map((load) => load.stop()));
  return results.map((result, i) => ({
    requests: result.ok + result.failed,
    failed: result.failed,
    p99: quantile(result.latenciesMs.slice(0, counted[i]).sort((a, b) => a - b), 0.99),
  }));
}

try {
  await cluster.declare(service, { numInstances: 2 });
  await cluster.deployed(await cluster.deploy(service));
  await cluster.routable(service, 2);

  for (const away of storeAbsences(cluster.etcd)) {
    const before = await unitContainers(engine.docker, service);
    const deploymentsBefore = ((await http('GET', `${scheduler.url}/deployments?service=${service}`)).body as { id: string }[]).length;
    let durationMs = 0;
    const outage = await measure(async (loads) => {
      const started = Date.now();
      await away.take();
      await sleep(SECONDS * 1000);
      const answered = loads.map((load) => load.progress.latenciesMs.length);
      await away.bring();
      await healedAfterReturn(scheduler.url, Date.now(), LEASE_TTL_SECONDS);
      durationMs = Date.now() - started;
      return answered;
    });
    const after = await unitContainers(engine.docker, service);
    const restarted = Object.keys(before).filter((name) => before[name] !== after[name]).length + Object.keys(after).filter((name) => !(name in before)).length;
    const reschedules = ((await http('GET', `${scheduler.url}/deployments?service=${service}`)).body as { id: string }[]).length - deploymentsBefore;
    // The reference: the same load for the same time, the store up.
    const reference = await measure(async (loads) => {
      await sleep(SECONDS * 1000);
      const answered = loads.map((load) => load.progress.latenciesMs.length);
      await sleep(Math.max(0, durationMs - SECONDS * 1000));
      return answered;
    });
    rows.push(...outageRows(away, outage, reference, restarted, reschedules, durationMs));
  }
} finally {
  await cluster.stop();
}

function outageRows(away: StoreAbsence, outage: Window[], reference: Window[], restarted: number, reschedules: number, durationMs: number): BenchRow[] {
  const window = `etcd ${away.name} ${SECONDS} s, load ${(durationMs / 1000).toFixed(0)} s`;
  const rows = gateways.flatMap((gateway, i) => {
    const [o, r] = [outage[i]!, reference[i]!];
    return [
      { benchmark: `${window}, ${gateway.plane} gateway: failed requests`, platform: `${o.failed} of ${o.requests}`, reference: `${r.failed} of ${r.requests}`, ratio: '-', target: '0' },
      { benchmark: `${window}, ${gateway.plane} gateway: p99 (store away vs up)`, platform: `${o.p99.toFixed(1)} ms`, reference: `${r.p99.toFixed(1)} ms`, ratio: `${(o.p99 / r.p99).toFixed(2)}x`, target: '-' },
    ];
  });
  rows.push({ benchmark: `${window}: units restarted or moved, deployments started`, platform: `${restarted}, ${reschedules}`, reference: '-', ratio: '-', target: '0, 0' });
  return rows;
}

console.log(`\nStore outage, 2 units, lease TTL ${LEASE_TTL_SECONDS} s (load average ${loadAverage()})`);
printTable(rows);
