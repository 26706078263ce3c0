import t from 'tap';
import { randomBytes } from 'node:crypto';
import { startEtcd } from '../harness/etcd.js';
import { startDockerd } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage, type TestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { http, serveRole } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';
import { EtcdStore } from '../../src/store/etcd-store.js';
import { releasePrefix } from '../../src/store/keys.js';

// Releases, rolling updates, auto-revert, rollback, scaling and idempotent triggers, on real
// etcd, dockerd and registry, with every role in its own process.

const engine = await startDockerd();
const registry = await startRegistry();
const etcd = await startEtcd();
const repository = `rel/web-${randomBytes(3).toString('hex')}`;
const [v1, v2, broken] = await Promise.all([
  buildTestImage(engine.docker, registry.host, repository, 'v1', { label: 'one' }),
  buildTestImage(engine.docker, registry.host, repository, 'v2', { label: 'two' }),
  buildTestImage(engine.docker, registry.host, repository, 'v3-broken', { variant: 'crash' }),
]);
const flags = ['--etcd', etcd.url, '--announce-ttl', '3'];
const directory = await serveRole('directory', await freePort(), flags);
const scheduler = await serveRole('scheduler', await freePort(), flags);
const orchestrator = await serveRole('orchestrator', await freePort(), flags);
const agent = await serveRole('agent', await freePort(), [...flags, '--network', 'host', '--machine-id', 'rel', '--stop-grace', '2', '--drain-seconds', '1'], { DOCKER_HOST: engine.dockerHost });
const store = new EtcdStore([etcd.url]);
/** Release keys of the name in the store itself, whoever they belong to. */
const etcdReleases = async (name: string): Promise<number> => (await store.list(releasePrefix(name))).length;
t.teardown(async () => {
  await store.close();
  await Promise.all([directory, scheduler, orchestrator, agent].map((role) => role.stop()));
  await Promise.all([etcd.stop(), registry.stop()]);
  await engine.stop();
});

const orch = (path: string) => `${orchestrator.url}${path}`;
const sched = (path: string) => `${scheduler.url}${path}`;

interface Unit {
  unit: string;
  instance: number;
  release: number;
  image: string;
  active: string;
  sub: string;
  restarts: number;
  errorKind?: string;
  address?: string;
}
interface Deployment {
  id: string;
  state: string;
  release: number;
  reason?: string;
  trigger: string;
}

const unitsOf = async (service: string): Promise<Unit[]> => (await http('GET', orch(`/services/${service}/units`))).body;
const running = (units: Unit[]) => units.filter((u) => u.active === 'active' && u.sub === 'running');

async function declare(numInstances = 3): Promise<string> {
  const name = `rel-${randomBytes(3).toString('hex')}`;
  const created = await http('POST', orch('/services'), { name, description: 'releases', containerRepository: `${registry.host}/${repository}`, loadBalanced: true, publicFacing: false, numInstances });
  if (created.status !== 201) throw new Error(JSON.stringify(created.body));
  await http('PATCH', orch(`/services/${name}/config/next`), { env: { GREETING: 'first' } });
  return name;
}

const deploy = (service: string, image: TestImage, pushedAt = 0) =>
  http('POST', sched('/hooks/deploy'), { serviceName: service, containerRepository: image.reference, pushedAt });

async function finished(id: string, timeoutMs = 60_000): Promise<Deployment> {
  return waitFor(async () => {
    const deployment = (await http('GET', sched(`/deployments/${id}`))).body as Deployment;
    if (['succeeded', 'failed', 'reverted', 'superseded'].includes(deployment.state)) return deployment;
    // Not yet: what a timeout reports (the deployment as it stands, and the scheduler's last log lines).
    throw new Error(`still ${JSON.stringify(deployment)}; scheduler: ${scheduler.output()}`);
  }, timeoutMs, { what: `deployment ${id} finished` });
}

/** All `count` units run `release`, answer HTTP, and nothing else of the service remains. */
async function settledOn(service: string, count: number, release: number): Promise<Unit[]> {
  return waitFor(async () => {
    const units = await unitsOf(service);
    return units.length === count && running(units).length === count && units.every((u) => u.release === release) ? units : undefined;
  }, 60_000, { what: `${count} units of ${service} on v${release}` });
}

/** Samples the service while `during` runs: the fewest running units that answered HTTP. */
async function sampleServing(service: string, during: Promise<unknown>): Promise<{ min: number; samples: number }> {
  let done = false;
  void during.finally(() => (done = true));
  let min = Infinity;
  let samples = 0;
  while (!done) {
    const units = running(await unitsOf(service));
    const answers = await Promise.all(units.map((u) => fetch(`http://${u.address}/`, { signal: AbortSignal.timeout(2000) }).then((r) => r.ok, () => false)));
    min = Math.min(min, answers.filter(Boolean).length);
    samples++;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  await during;
  return { min, samples };
}

const service = await declare(3);

t.test('v1 → v2 is a rolling update: never fewer than numInstances - maxUnavailable units serve', async (t) => {
  const first = await deploy(service, v1);
  t.match(first.body, { statusCode: 200, outcome: 'created', release: 'v1' });
  t.equal((await finished(first.body.deployment)).state, 'succeeded');
  await settledOn(service, 3, 1);

  const second = await deploy(service, v2);
  t.match(second.body, { outcome: 'created', release: 'v2', image: `${registry.host}/${repository}@${v2.digest}` });
  const sampled = await sampleServing(service, finished(second.body.deployment));
  t.ok(sampled.samples > 5, `${sampled.samples} samples taken`);
  t.ok(sampled.min >= 3, `at least 3 units served throughout (fewest seen: ${sampled.min})`);
  t.equal((await finished(second.body.deployment)).state, 'succeeded');
  const units = await settledOn(service, 3, 2);
  for (const unit of units) {
    t.equal(unit.image, `${registry.host}/${repository}@${v2.digest}`, `${unit.unit} runs v2's digest`);
    t.match(await fetch(`http://${unit.address}/`).then((r) => r.text()), new RegExp(`^${unit.unit} first v2 two`));
  }
  // The agent gives a unit its name back in the pass after the old container is gone, which may
  // come a moment after the deployment is recorded succeeded (failed once at load 20).
  const names = [1, 2, 3].map((i) => `/${service}-${i}.service`);
  const containerNames = async () => (await engine.docker.listContainers({ filters: { label: [`platform.service=${service}`] } })).map((c) => c.Names[0]).sort();
  await waitFor(async () => JSON.stringify(await containerNames()) === JSON.stringify(names), 10_000, { what: 'the unit names back on the containers' }).catch(() => undefined);
  t.same(await containerNames(), names, 'containers carry the unit names again');
});

t.test('a broken v3 fails with a reason and auto-reverts; the v2 units never stop serving', async (t) => {
  const third = await deploy(service, broken);
  t.match(third.body, { outcome: 'created', release: 'v3' });
  const sampled = await sampleServing(service, finished(third.body.deployment, 90_000));
  t.ok(sampled.min >= 3, `v2 units kept serving (fewest seen: ${sampled.min})`);
  const outcome = await finished(third.body.deployment);
  t.equal(outcome.state, 'reverted');
  t.match(outcome.reason, /exited with code 1.*reverting to v2/);
  const revert = await waitFor(async () => {
    const all = (await http('GET', sched(`/deployments?service=${service}`))).body as Deployment[];
    return all.find((d) => d.trigger === 'revert' && d.state === 'succeeded');
  }, 60_000, { what: 'the revert deployment succeeded' });
  t.equal(revert.release, 2);
  await settledOn(service, 3, 2);
  const journal = (await http('GET', orch(`/journal?service=${service}`))).body as { kind: string }[];
  t.ok(journal.some((entry) => entry.kind === 'deployment.reverted'), 'the journal records the revert');
});

t.test('rollback to v1 restores v1\'s digest and env although the next config changed', async (t) => {
  await http('PATCH', orch(`/services/${service}/config/next`), { env: { GREETING: 'changed' } });
  const rollback = await http('POST', orch(`/services/${service}/rollback`), { version: 'v1' });
  t.match(rollback, { status: 200, body: { outcome: 'created', release: 'v4', image: `${registry.host}/${repository}@${v1.digest}` } });
  t.equal((await finished(rollback.body.deployment)).state, 'succeeded');
  for (const unit of await settledOn(service, 3, 4)) {
    t.match(await fetch(`http://${unit.address}/`).then((r) => r.text()), new RegExp(`^${unit.unit} first v4 one`), `${unit.unit} has v1's env`);
  }
  const release = (await http('GET', orch(`/services/${service}/config/history/v4`))).body;
  t.match(release, { version: 4, rollbackOf: 1, digest: v1.digest, config: { env: { GREETING: 'first' } } });
  t.equal((await http('POST', orch(`/services/${service}/rollback`), { version: 99 })).status, 404);
});

t.test('scaling adds and removes units without restarting the others', async (t) => {
  const before = new Map((await engine.docker.listContainers({ filters: { label: [`platform.service=${service}`] } })).map((c) => [c.Labels['platform.unit'], c.Id]));
  await http('PATCH', orch(`/services/${service}/config/next`), { numInstances: 5, env: { GREETING: 'first' } });
  const up = await http('POST', orch(`/services/${service}/deploy`), { containerRepository: v1.reference });
  t.match(up.body, { outcome: 'created', release: 'v5' });
  await settledOn(service, 5, 5);
  const during = new Map((await engine.docker.listContainers({ filters: { label: [`platform.service=${service}`] } })).map((c) => [c.Labels['platform.unit'], c.Id]));
  for (const [unit, id] of before) t.equal(during.get(unit), id, `${unit} kept its container`);

  await http('PATCH', orch(`/services/${service}/config/next`), { numInstances: 2 });
  await http('POST', orch(`/services/${service}/deploy`), { containerRepository: v1.reference });
  const units = await settledOn(service, 2, 6);
  t.same(units.map((u) => u.instance).sort(), [1, 2], 'the highest instances were removed');
  const after = await engine.docker.listContainers({ all: true, filters: { label: [`platform.service=${service}`] } });
  t.same(after.map((c) => c.Id).sort(), [before.get(`${service}-1.service`), before.get(`${service}-2.service`)].sort(), 'the kept units never restarted');
});

t.test('re-posting the same trigger creates one release; an older trigger is ignored as stale and journaled', async (t) => {
  const other = await declare(1);
  const at = Math.floor(Date.now() / 1000) + 1;
  const replies = await Promise.all(Array.from({ length: 5 }, () => deploy(other, v2, at)));
  t.same(replies.map((r) => r.status), [200, 200, 200, 200, 200]);
  t.same(replies.map((r) => r.body.outcome).sort(), ['created', 'unchanged', 'unchanged', 'unchanged', 'unchanged']);
  t.same(new Set(replies.map((r) => r.body.deployment)).size, 1, 'all name the same deployment');
  t.equal((await finished(replies[0]!.body.deployment)).state, 'succeeded');
  const again = await deploy(other, v2, at);
  t.match(again.body, { outcome: 'unchanged', release: 'v1' });
  const stale = await deploy(other, v1, at - 1);
  t.match(stale, { status: 200, body: { statusCode: 200, outcome: 'stale', message: /older than the one v1 was deployed for/ } });
  t.equal((await http('GET', sched(`/services/${other}/releases`))).body.length, 1, 'one release');
  const journal = (await http('GET', sched(`/journal?service=${other}&limit=5`))).body as { kind: string; message: string }[];
  t.ok(journal.some((entry) => entry.kind === 'deployment.stale'), 'the stale trigger is journaled');
  await new Promise((resolve) => setTimeout(resolve, 1000 * (at + 1) - Date.now()));
  const zero = await deploy(other, v1, 0);
  t.match(zero.body, { outcome: 'created', release: 'v2' }, 'pushedAt 0 stands for the time it is received');
  await finished(zero.body.deployment);
});

t.test('a push older than the declaration never deploys it; a time far in the future is refused with 400', async (t) => {
  const young = await declare(1);
  const old = await deploy(young, v1, Math.floor(Date.now() / 1000) - 3600);
  t.match(old.body, { outcome: 'stale', message: /older than the declaration/ });
  t.equal((await http('GET', sched(`/services/${young}/releases`))).body.length, 0, 'no release');
  const future = await deploy(young, v1, 1.7976931348623157e308);
  t.equal(future.status, 400);
  const ahead = await deploy(young, v1, Math.floor(Date.now() / 1000) + 3600);
  t.match(ahead, { status: 400, body: { message: /pushedAt must not be more than 5 minutes in the future/ } });
  const fine = await deploy(young, v1, 0);
  t.match(fine.body, { outcome: 'created', release: 'v1' }, 'and the service still deploys');
  await finished(fine.body.deployment);
});

t.test("a service declared again under a deleted one's name does not inherit its releases", async (t) => {
  const name = await declare(1);
  await http('PATCH', orch(`/services/${name}/config/next`), { env: { DB_PASSWORD: 'the-old-one' } });
  t.equal((await finished((await deploy(name, v1)).body.deployment)).state, 'succeeded');
  t.equal((await http('DELETE', orch(`/services/${name}`))).status, 204);
  const again = await http('POST', orch('/services'), { name, description: 'successor', containerRepository: `${registry.host}/${repository}-successor`, loadBalanced: false, publicFacing: false, numInstances: 1 });
  t.equal(again.status, 201);
  const history = await http('GET', orch(`/services/${name}/config/history`));
  t.same(history.body, [], 'no config history (and no old DB_PASSWORD)');
  t.notMatch(JSON.stringify(history.body), /the-old-one/);
  t.equal((await http('POST', orch(`/services/${name}/rollback`), { version: 1 })).status, 404, "rollback v1 cannot reach the old service's image");
  await waitFor(async () => (await etcdReleases(name)) === 0, 15_000, { what: "the deleted service's releases deleted from the store" });
});

/** Deploys the broken image and waits until its first unit is being restarted, its deployment still rolling. */
async function breakWhileRetrying(service: string): Promise<Deployment & { release: number }> {
  const reply = await deploy(service, broken);
  const version = reply.body.version as number;
  await waitFor(async () => {
    const units = await unitsOf(service);
    return units.some((u) => u.release === version && (u.sub === 'auto-restart' || u.active === 'failed' || u.restarts > 0));
  }, 30_000, { what: `a unit of v${version} being restarted`, intervalMs: 50 });
  const deployment = (await http('GET', sched(`/deployments/${reply.body.deployment}`))).body as Deployment;
  if (deployment.state !== 'rolling' && deployment.state !== 'pulling') throw new Error(`the broken rollout ended before the test could act on it: ${JSON.stringify(deployment)}`);
  return deployment;
}

t.test('a rollback issued while a broken rollout is still retrying takes over at once and serves v1 on all units', async (t) => {
  const roll = await declare(3);
  t.equal((await finished((await deploy(roll, v1)).body.deployment)).state, 'succeeded');
  await http('PATCH', orch(`/services/${roll}/config/next`), { env: { GREETING: 'second' } });
  t.equal((await finished((await deploy(roll, v2)).body.deployment)).state, 'succeeded');
  const brokenRollout = await breakWhileRetrying(roll);
  const started = Date.now();
  const rollback = await http('POST', orch(`/services/${roll}/rollback`), { version: 1 });
  t.match(rollback.body, { outcome: 'created', release: 'v4' });
  const outcome = await finished(rollback.body.deployment, 60_000);
  t.equal(outcome.state, 'succeeded', `the rollback succeeded (${outcome.reason ?? ''})`);
  t.ok(Date.now() - started < 30_000, `v1 runs everywhere ${Date.now() - started} ms after the rollback`);
  const units = await settledOn(roll, 3, 4);
  for (const unit of units) {
    t.equal(unit.image, `${registry.host}/${repository}@${v1.digest}`, `${unit.unit} runs v1's digest`);
    t.match(await fetch(`http://${unit.address}/`).then((r) => r.text()), new RegExp(`^${unit.unit} first v4 one`), `${unit.unit} has v1's env`);
  }
  t.equal((await finished(brokenRollout.id)).state, 'superseded', 'the broken rollout was superseded');
  const leftovers = await engine.docker.listContainers({ all: true, filters: { label: [`platform.service=${roll}`, `platform.release=${brokenRollout.release}`] } });
  t.same(leftovers.map((c) => c.Names[0]), [], "the broken release's container was removed (its restart loop ended)");
});

t.test('a rollback also takes over from a rollout stuck on a failing health check', async (t) => {
  const checked = await declare(2);
  await http('PATCH', orch(`/services/${checked}/config/next`), { healthCheck: { path: '/index.html' } });
  t.equal((await finished((await deploy(checked, v1)).body.deployment)).state, 'succeeded');
  await http('PATCH', orch(`/services/${checked}/config/next`), { healthCheck: { path: '/missing' } });
  const stuck = await deploy(checked, v2);
  await waitFor(async () => (await unitsOf(checked)).some((u) => u.release === stuck.body.version && u.errorKind === 'health-check'), 30_000, { what: 'the v2 unit waiting for its health check' });
  const started = Date.now();
  const rollback = await http('POST', orch(`/services/${checked}/rollback`), { version: 1 });
  t.equal((await finished(rollback.body.deployment, 60_000)).state, 'succeeded');
  t.ok(Date.now() - started < 30_000, `v1 serves again ${Date.now() - started} ms after the rollback`);
  t.equal((await finished(stuck.body.deployment)).state, 'superseded');
  const leftovers = await engine.docker.listContainers({ all: true, filters: { label: [`platform.service=${checked}`, `platform.release=${stuck.body.version}`] } });
  t.same(leftovers.map((c) => c.Names[0]), [], 'the unit that never passed its check is gone');
});

t.test('20 concurrent triggers with different tags: the last accepted one wins, with exactly numInstances units', async (t) => {
  const racer = await declare(3);
  const images = await Promise.all(Array.from({ length: 20 }, (_, i) => buildTestImage(engine.docker, registry.host, repository, `race-${i}`, { label: `race-${i}` })));
  // Not from a clean service: from one whose broken rollout is superseded by the race.
  t.equal((await finished((await deploy(racer, v1)).body.deployment)).state, 'succeeded');
  await breakWhileRetrying(racer);
  const replies = await Promise.all(images.map((image) => deploy(racer, image)));
  t.same(replies.map((r) => r.status), Array(20).fill(200));
  const last = Math.max(...replies.map((r) => r.body.version as number));
  t.equal(last, 22, 'twenty releases after v1 and the broken v2');
  const winner = replies.find((r) => r.body.version === last)!;
  t.equal((await finished(winner.body.deployment, 60_000)).state, 'succeeded');
  const units = await settledOn(racer, 3, last);
  t.same(units.map((u) => u.unit).sort(), [1, 2, 3].map((i) => `${racer}-${i}.service`), 'no duplicates, none missing');
  const states = await Promise.all(replies.filter((r) => r !== winner).map((r) => finished(r.body.deployment)));
  t.ok(states.every((d) => d.state === 'superseded' || d.state === 'succeeded'), 'the others were superseded (or finished before the next arrived)');
  const containers = await engine.docker.listContainers({ all: true, filters: { label: [`platform.service=${racer}`] } });
  t.equal(containers.length, 3, 'exactly three containers');
  t.ok(containers.every((c) => c.Labels['platform.release'] === String(last)));
});

t.test('a unit that never passes its HTTP health check fails the deployment at the progress deadline', async (t) => {
  const checked = await declare(1);
  await http('PATCH', orch(`/services/${checked}/config/next`), { healthCheck: { path: '/index.html' } });
  const good = await deploy(checked, v1);
  t.equal((await finished(good.body.deployment)).state, 'succeeded', 'a path that answers 200 passes');
  await http('PATCH', orch(`/services/${checked}/config/next`), { healthCheck: { path: '/missing' }, progressDeadlineSeconds: 5, autoRevert: false });
  const bad = await deploy(checked, v2);
  const outcome = await finished(bad.body.deployment, 30_000);
  t.equal(outcome.state, 'failed');
  t.match(outcome.reason, /no progress within 5 s: .*waiting for GET \/missing to answer 2xx/);
  const units = running(await unitsOf(checked));
  t.same(units.map((u) => u.release), [1], 'the v1 unit still serves');
});
