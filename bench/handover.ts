import { randomBytes } from 'node:crypto';
import { startGatewayCluster } from '../test/harness/gateway-cluster.js';
import { buildSingleWriterImages, deployUnderLoad, runSingleWriter } from '../test/harness/single-writer.js';
import { median, ms, percentile, printTable, type BenchRow } from './table.js';

// Handover deploys of a single-writer service (one unit that refuses to start while another holds
// the lock on its volume) against plain rolling deploys of the same service, each under 3 client
// loops per data plane (HAProxy and Node gateways, as in the tests). Per unit replaced: requests
// held (answered later than HELD_MS), their p99 and longest wait, and requests failed. Each round
// deploys the other image (v1 ↔ v2), ROUNDS times per strategy; medians over rounds.

const ROUNDS = 3;
/** A request answered later than this waited on a hold (an unheld one takes a few ms). */
const HELD_MS = 200;

const cluster = await startGatewayCluster();
const images = await buildSingleWriterImages(cluster);

interface Round {
  plane: string;
  held: number[];
  failed: number;
  deployMs: number;
  state: string;
}

async function rounds(strategy: 'handover' | 'rolling'): Promise<Round[]> {
  const service = `${strategy === 'handover' ? 'hand' : 'roll'}-${randomBytes(2).toString('hex')}`;
  await runSingleWriter(cluster, images, service, images.v1, strategy === 'handover' ? { strategy: 'handover', handoverTimeout: 30 } : undefined);
  const found: Round[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const { deployment, deployMs, results } = await deployUnderLoad(cluster, service, round % 2 === 0 ? images.v2 : images.v1);
    for (const [i, result] of results.entries()) {
      found.push({ plane: cluster.gateways[i]!.plane, held: result.latenciesMs.filter((latency) => latency > HELD_MS), failed: result.failed, deployMs, state: deployment.state });
    }
  }
  return found;
}

try {
  const handover = await rounds('handover');
  const rolling = await rounds('rolling');
  const rows: BenchRow[] = [];
  const ratio = (a: number, b: number): string => (b === 0 ? (a === 0 ? '1.00x' : 'n/a') : `${(a / b).toFixed(2)}x`);
  for (const plane of new Set(handover.map((round) => round.plane))) {
    const ofPlane = (all: Round[]) => all.filter((round) => round.plane === plane);
    const [h, r] = [ofPlane(handover), ofPlane(rolling)];
    const stat = (all: Round[], pick: (round: Round) => number) => median(all.map(pick));
    const failedH = stat(h, (round) => round.failed);
    const failedR = stat(r, (round) => round.failed);
    rows.push({ benchmark: `${plane}: failed requests per unit replaced`, platform: String(failedH), reference: `${failedR} (rolling)`, ratio: ratio(failedH, failedR), target: '0' });
    const heldH = stat(h, (round) => round.held.length);
    const heldR = stat(r, (round) => round.held.length);
    rows.push({ benchmark: `${plane}: requests held per unit replaced`, platform: String(heldH), reference: `${heldR} (rolling)`, ratio: ratio(heldH, heldR), target: 'all in flight' });
    const p99 = stat(h, (round) => percentile(round.held, 99));
    const longest = stat(h, (round) => Math.max(0, ...round.held));
    rows.push({ benchmark: `${plane}: held wait p99 / max`, platform: `${ms(p99)} / ${ms(longest)}`, reference: '30000 ms (handoverTimeout)', ratio: ratio(longest, 30_000), target: '< timeout' });
  }
  const deployH = median(handover.map((round) => round.deployMs));
  const deployR = median(rolling.map((round) => round.deployMs));
  rows.push({ benchmark: 'deploy time (1 unit)', platform: ms(deployH), reference: `${ms(deployR)} (rolling)`, ratio: ratio(deployH, deployR), target: '' });
  const states = (all: Round[]) => [...new Set(all.map((round) => round.state))].join(', ');
  rows.push({ benchmark: 'deployment outcomes', platform: states(handover), reference: `${states(rolling)} (rolling)`, ratio: '', target: 'succeeded' });
  printTable(rows);
} finally {
  await cluster.stop();
}
