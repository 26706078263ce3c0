import t from 'tap';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { startGatewayCluster, gatewayRoutes } from '../harness/gateway-cluster.js';
import { buildSingleWriterImages, deployUnderLoad, pageLabel, runSingleWriter } from '../harness/single-writer.js';
import type { LoadResult } from '../harness/http-load.js';

// Handover deploys of a single-writer service (rollout.strategy: handover): its unit refuses to
// start while another unit holds the lock file on its volume. Three client loops per data plane
// (HAProxy and Node) run through each deploy. The gateways hold the service's requests while the
// old unit stops and the new one starts, so none fails; a new release that never becomes ready is
// stopped and the old unit started again before the hold runs out. A plain rolling deploy of the
// same service, for contrast, fails requests (or fails).

const HANDOVER_TIMEOUT_SECONDS = 20;

const cluster = await startGatewayCluster();
t.teardown(() => cluster.stop());
const images = await buildSingleWriterImages(cluster);

/** Polls every gateway's GET /routes until stopped: the most requests each showed held for `service`. */
function watchHeld(service: string): { stop: () => Promise<number[]> } {
  const most = cluster.gateways.map(() => 0);
  let stopped = false;
  const polling = (async () => {
    while (!stopped) {
      for (const [i, gateway] of cluster.gateways.entries()) {
        const route = (await gatewayRoutes(gateway)).find((candidate) => candidate.name === service) as { held?: number } | undefined;
        most[i] = Math.max(most[i]!, route?.held ?? 0);
      }
      await sleep(100);
    }
  })();
  return {
    stop: async () => {
      stopped = true;
      await polling;
      return most;
    },
  };
}

const summary = (plane: string, result: LoadResult): string => {
  const longest = Math.max(0, ...result.latenciesMs);
  return `${plane}: ${result.ok} ok, ${result.failed} failed, longest ${Math.round(longest)} ms${result.failures.length ? `: ${result.failures.join('; ')}` : ''}`;
};

t.test('a handover deploy v1 → v2 fails no request, and no request is held longer than the handover timeout', async (t) => {
  const service = `hand-${randomBytes(2).toString('hex')}`;
  await runSingleWriter(cluster, images, service, images.v1, { strategy: 'handover', handoverTimeout: HANDOVER_TIMEOUT_SECONDS });

  const held = watchHeld(service);
  const { deployment, results } = await deployUnderLoad(cluster, service, images.v2);
  const mostHeld = await held.stop();
  t.equal(deployment.state, 'succeeded', `the handover deploy succeeded${deployment.reason ? `: ${deployment.reason}` : ''}`);
  for (const [i, result] of results.entries()) {
    const plane = cluster.gateways[i]!.plane;
    t.comment(`handover, ${summary(plane, result)}`);
    t.equal(result.failed, 0, `${plane}: no request failed`);
    const longest = Math.max(...result.latenciesMs);
    t.ok(longest <= HANDOVER_TIMEOUT_SECONDS * 1000, `${plane}: the longest request took ${Math.round(longest)} ms, within the ${HANDOVER_TIMEOUT_SECONDS} s handover timeout`);
    // The old unit is stopped before the new one starts: requests in between were held, not answered at once.
    t.ok(longest >= 1000, `${plane}: requests were held while the units changed (longest ${Math.round(longest)} ms)`);
    t.ok(mostHeld[i]! >= 1, `${plane}: GET /routes showed requests held (at most ${mostHeld[i]})`);
    t.same([...new Set(result.bodies.map(pageLabel))].sort(), ['one', 'two'], `${plane}: v1 answered, then v2`);
    t.same([...new Set(result.bodies.slice(-10).map(pageLabel))], ['two'], `${plane}: v2 answers at the end`);
  }
});

t.test('a release that never becomes ready: the old unit is back, its held requests go to it, none fails', async (t) => {
  const service = `stuck-${randomBytes(2).toString('hex')}`;
  await runSingleWriter(cluster, images, service, images.v2, { strategy: 'handover', handoverTimeout: HANDOVER_TIMEOUT_SECONDS });

  const { deployment, results } = await deployUnderLoad(cluster, service, images.stuck);
  t.match(deployment.state, /^(failed|reverted)$/, `the deploy of the release that never serves ended ${deployment.state}: ${deployment.reason}`);
  t.match(deployment.reason ?? '', /the old unit was started again/, 'its reason says the old unit is back');
  for (const [i, result] of results.entries()) {
    const plane = cluster.gateways[i]!.plane;
    t.comment(`failed handover, ${summary(plane, result)}`);
    t.equal(result.failed, 0, `${plane}: no request failed`);
    t.ok(Math.max(...result.latenciesMs) <= HANDOVER_TIMEOUT_SECONDS * 1000, `${plane}: no request was held beyond the handover timeout`);
    t.same([...new Set(result.bodies.map(pageLabel))], ['two'], `${plane}: only the old release (v2) answered`);
  }
});

t.test('for contrast, a plain rolling deploy of the same single-writer service fails requests or fails', async (t) => {
  const service = `roll-${randomBytes(2).toString('hex')}`;
  await runSingleWriter(cluster, images, service, images.v1);

  const { deployment, results } = await deployUnderLoad(cluster, service, images.v2);
  for (const [i, result] of results.entries()) {
    const plane = cluster.gateways[i]!.plane;
    t.comment(`rolling (${deployment.state}), ${summary(plane, result)}`);
    t.ok(result.failed > 0 || deployment.state !== 'succeeded', `${plane}: the rolling deploy failed requests (${result.failed}) or ended ${deployment.state}`);
  }
});
