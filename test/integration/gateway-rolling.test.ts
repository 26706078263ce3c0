import t from 'tap';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { startGatewayCluster } from '../harness/gateway-cluster.js';
import { startLoad } from '../harness/http-load.js';

// A rolling deploy v1 → v2 through the gateway fails no request: the scheduler starts a v2 unit
// beside each v1 unit (maxSurge 1, maxUnavailable 0), the gateway routes to it once it runs, and
// the v1 unit is drained (deactivating, no new requests) before it stops. One client loop per data
// plane runs through the same rollout.

const cluster = await startGatewayCluster();
const { gateways, declare, deploy, deployed, routable } = cluster;
t.teardown(() => cluster.stop());

t.test('a rolling deploy v1 → v2 while clients keep sending fails no request', async (t) => {
  const service = `roll-${randomBytes(2).toString('hex')}`;
  await declare(service, { numInstances: 3, env: { GREETING: 'roll' } });
  await deployed(await deploy(service, 'v1'));
  await routable(service, 3);
  const running = gateways.map((gateway) => startLoad({ url: `http://127.0.0.1:${gateway.port}/`, host: `${service}.platform.internal`, concurrency: 4, maxDurationMs: 20_000 }));
  await sleep(1_000);
  await deployed(await deploy(service, 'v2'));
  await routable(service, 3);
  await sleep(1_000);
  const results = await Promise.all(running.map((load) => load.stop()));
  const releases = (bodies: string[]) => [...new Set(bodies.map((body) => body.split(' ').slice(2).join(' ')))].sort();
  for (const [i, result] of results.entries()) {
    const plane = gateways[i]!.plane;
    const summary = `${plane}: ${result.ok} ok, ${result.failed} failed in ${result.durationMs} ms${result.failures.length ? `: ${result.failures.join('; ')}` : ''}`;
    t.comment(`rolling deploy, ${summary}`);
    t.equal(result.failed, 0, summary);
    t.same(releases(result.bodies), ['v1 one', 'v2 two'], `${plane}: both releases answered during the rollout`);
    t.same(releases(result.bodies.slice(-20)), ['v2 two'], `${plane}: only v2 answers at the end`);
  }
});
