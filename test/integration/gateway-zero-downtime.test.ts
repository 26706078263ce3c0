import t from 'tap';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { http } from '../harness/platform.js';
import { startGatewayCluster } from '../harness/gateway-cluster.js';
import { startLoad, type LoadResult } from '../harness/http-load.js';

// Zero downtime through the gateway on real units: a bounded client loop (127.0.0.1, four
// workers, keep-alive and new connections mixed) runs while units go away. A scale-down drains
// the removed units first (the agent marks them deactivating, the gateway stops sending to them,
// then they stop), so no request may fail; a killed unit may only fail requests it had in flight.
// One loop per data plane runs through the same events.

const cluster = await startGatewayCluster();
const { directory, gateways, declare, deploy, deployed, routable } = cluster;
t.teardown(() => cluster.stop());

const CONCURRENCY = 4;
const name = (prefix: string) => `${prefix}-${randomBytes(2).toString('hex')}`;
const load = (service: string) =>
  gateways.map((gateway) => startLoad({ url: `http://127.0.0.1:${gateway.port}/`, host: `${service}.platform.internal`, concurrency: CONCURRENCY, maxDurationMs: 20_000 }));
const describe = (result: LoadResult, i: number) => `${gateways[i]!.plane}: ${result.ok} ok, ${result.failed} failed in ${result.durationMs} ms${result.failures.length ? `: ${result.failures.join('; ')}` : ''}`;
const unitsAnswering = (bodies: string[]) => [...new Set(bodies.map((body) => body.split(' ')[0]))].sort();

const shrinking = name('shrink');
const killed = name('kill');
await Promise.all([declare(shrinking, { numInstances: 3 }), declare(killed, { numInstances: 3 })]);
await Promise.all([deploy(shrinking), deploy(killed)]);
await Promise.all([routable(shrinking, 3), routable(killed, 3)]);

t.test('scaling down 3 → 1 while clients keep sending fails no request', async (t) => {
  const running = load(shrinking);
  await sleep(1_000);
  t.equal((await http('PATCH', `${directory.url}/services/${shrinking}/config`, { numInstances: 1 })).status, 200);
  const deployment = await deploy(shrinking);
  await deployed(deployment);
  await routable(shrinking, 1);
  const before = running.map((loop) => loop.progress.bodies.length);
  await sleep(1_000);
  const results = await Promise.all(running.map((loop) => loop.stop()));
  for (const [i, result] of results.entries()) {
    t.comment(`scale down: ${describe(result, i)}`);
    t.equal(result.failed, 0, describe(result, i));
    t.ok(result.ok > 20, 'the loop kept sending');
    t.same(unitsAnswering(result.bodies.slice(0, 20)), [1, 2, 3].map((i) => `${shrinking}-${i}.service`), 'all three units answered before');
    t.same(unitsAnswering(result.bodies.slice(before[i])), [`${shrinking}-1.service`], 'only instance 1 answers after');
  }
});

t.test('docker kill of a unit fails at most the requests it had in flight', async (t) => {
  const running = load(killed);
  await sleep(1_000);
  const [victim] = await cluster.engine.docker.listContainers({ filters: { label: [`platform.service=${killed}`, 'platform.instance=2'] } });
  t.ok(victim, 'the container of instance 2 runs');
  await cluster.engine.docker.getContainer(victim!.Id).kill();
  await sleep(4_000);
  const results = await Promise.all(running.map((loop) => loop.stop()));
  for (const [i, result] of results.entries()) {
    t.comment(`docker kill: ${describe(result, i)} (at most ${CONCURRENCY} requests can be in flight on the killed unit)`);
    const metrics = ((await http('GET', `${gateways[i]!.url}/metrics`)).body as string).split('\n');
    t.comment(`gateway: ${metrics.filter((line) => line.startsWith('platform_gateway_') && line.includes(`service="${killed}"`) && !line.includes('routable')).join(', ')}`);
    t.ok(result.failed <= CONCURRENCY, describe(result, i));
    t.ok(result.ok > 20, 'the loop kept sending');
  }
});
