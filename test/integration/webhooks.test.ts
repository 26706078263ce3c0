import t from 'tap';
import { createHmac, randomBytes } from 'node:crypto';
import { startEtcd } from '../harness/etcd.js';
import { startDockerd } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage, type TestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { http, serveRole } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';

// Registry webhooks end to end: a real Distribution registry notifies the scheduler of `docker push`
// through the real dockerd, and the pushed digest runs on every unit. GitHub and Docker Hub
// deliveries are posted as those services send them. Roles run as processes on real etcd.

const suffix = randomBytes(3).toString('hex');
const TOKEN = `reg-${randomBytes(12).toString('hex')}`;
const HUB_TOKEN = `hub-${randomBytes(12).toString('hex')}`;
const GH_SECRET = `gh-${randomBytes(12).toString('hex')}`;

const engine = await startDockerd();
const etcd = await startEtcd();
// The registry must know where to post before the scheduler runs: the port is chosen first.
const schedulerPort = await freePort();
const registry = await startRegistry({ notificationUrl: `http://127.0.0.1:${schedulerPort}/hooks/registry`, token: TOKEN });
// GHCR stands in here: a registry that notifies nobody, whose pushes GitHub would announce.
const ghcr = await startRegistry();
const flags = ['--etcd', etcd.url, '--announce-ttl', '3'];
const directory = await serveRole('directory', await freePort(), flags);
const roles = [directory];
t.teardown(async () => {
  await Promise.all(roles.map((role) => role.stop()));
  await Promise.all([etcd.stop(), registry.stop(), ghcr.stop()]);
  await engine.stop();
});

const repository = `wh/app-${suffix}`;
const app = `wh-app-${suffix}`;
const audit = `wh-audit-${suffix}`;

async function declare(name: string, containerImage: string, numInstances: number, autoDeploy: 'always' | 'never' = 'always'): Promise<void> {
  const created = await http('POST', `${directory.url}/services`, { name, containerImage, numInstances, autoDeploy });
  if (created.status !== 201) throw new Error(JSON.stringify(created.body));
}
await declare(app, `${registry.host}/${repository}`, 3);
await declare(audit, `${registry.host}/${repository}`, 1, 'never');

// Pushed while no scheduler listens: the registry keeps retrying its notifications.
const v1 = await buildTestImage(engine.docker, registry.host, repository, 'v1', { label: 'one' });

// The agent first: the first delivery arrives as soon as the scheduler listens.
const agent = await serveRole('agent', await freePort(), [...flags, '--network', 'host', '--machine-id', `wh-${suffix}`, '--stop-grace', '1', '--drain-seconds', '0'], { DOCKER_HOST: engine.dockerHost });
const orchestrator = await serveRole('orchestrator', await freePort(), flags);
roles.push(agent, orchestrator);
const env = { PLATFORM_REGISTRY_WEBHOOK_TOKEN: TOKEN, PLATFORM_DOCKERHUB_WEBHOOK_TOKEN: HUB_TOKEN, PLATFORM_GITHUB_WEBHOOK_SECRET: GH_SECRET };
const scheduler = await serveRole('scheduler', schedulerPort, flags, env);
roles.push(scheduler);

const sched = (path: string) => `${scheduler.url}${path}`;

interface Unit {
  unit: string;
  image: string;
  active: string;
  sub: string;
}
interface Deployment {
  id: string;
  service: string;
  state: string;
  release: number;
  image: string;
  trigger: string;
}

/** POSTs a raw body with headers; returns the status, the parsed reply and how long the answer took. */
async function post(path: string, body: string, headers: Record<string, string>): Promise<{ status: number; body: any; ms: number }> {
  const started = performance.now();
  const response = await fetch(sched(path), { method: 'POST', headers, body, signal: AbortSignal.timeout(10_000) });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : undefined, ms: performance.now() - started };
}

const deploymentsOf = async (service?: string): Promise<Deployment[]> => (await http('GET', sched(`/deployments${service ? `?service=${service}` : ''}`))).body;

/** Every one of the service's `count` units runs `image` (registry/repository@digest). */
async function runningOn(service: string, count: number, image: string, timeoutMs = 60_000): Promise<Unit[]> {
  return waitFor(async () => {
    const units = (await http('GET', `${orchestrator.url}/services/${service}/units`)).body as Unit[];
    const running = units.filter((u) => u.active === 'active' && u.sub === 'running' && u.image === image);
    return units.length === count && running.length === count ? units : undefined;
  }, timeoutMs, { what: `${count} units of ${service} running ${image}` });
}

async function succeeded(service: string, release: number): Promise<Deployment> {
  let seen: Deployment[] = [];
  try {
    return await waitFor(async () => (seen = await deploymentsOf(service)).find((d) => d.release === release && d.state === 'succeeded'), 60_000);
  } catch {
    throw new Error(`${service} v${release} did not succeed; its deployments: ${JSON.stringify(seen)}`);
  }
}

const pinned = (image: TestImage, host = registry.host, repo = repository) => `${host}/${repo}@${image.digest}`;

/** A notification envelope as docker-registry 2.8 posts it (one manifest push). */
const envelope = (id: string, image: TestImage, tag: string, timestamp: string) =>
  JSON.stringify({
    events: [
      {
        id,
        timestamp,
        action: 'push',
        target: { mediaType: 'application/vnd.docker.distribution.manifest.v2+json', size: 528, digest: image.digest, length: 528, repository, url: `http://${registry.host}/v2/${repository}/manifests/${image.digest}`, tag },
        request: { id: randomBytes(8).toString('hex'), addr: '127.0.0.1:40000', host: registry.host, method: 'PUT', useragent: 'docker/20.10' },
        actor: {},
        source: { addr: 'test:5000', instanceID: 'test' },
      },
    ],
  });
const registryHeaders = { 'content-type': 'application/vnd.docker.distribution.events.v1+json', authorization: `Bearer ${TOKEN}` };

t.test('a push made while the scheduler was down reaches it through the registry retries and deploys once', async (t) => {
  await succeeded(app, 1);
  await runningOn(app, 3, pinned(v1));
  const [deployment] = await deploymentsOf(app);
  t.match(deployment, { release: 1, trigger: 'registry', image: pinned(v1) });
  const releases = (await http('GET', sched(`/services/${app}/releases`))).body;
  t.equal(releases.length, 1, 'one release');
  t.match(releases[0], { version: 1, digest: v1.digest, tag: 'v1', image: pinned(v1) });
  t.ok(releases[0].pushedAt > 0, 'pushedAt comes from the event timestamp');
});

t.test('docker push of a new tag runs exactly that digest on all units; an unrelated push changes nothing', async (t) => {
  const unrelated = await buildTestImage(engine.docker, registry.host, `wh/unrelated-${suffix}`, 'v1', { label: 'unrelated' });
  t.ok(unrelated.digest);
  const v2 = await buildTestImage(engine.docker, registry.host, repository, 'v2', { label: 'two' });
  const pushed = performance.now();
  await runningOn(app, 3, pinned(v2));
  t.comment(`push returned → 3 units running the new digest: ${(performance.now() - pushed).toFixed(0)} ms`);
  await succeeded(app, 2);
  t.match((await http('GET', sched(`/services/${app}/releases/v2`))).body, { digest: v2.digest, tag: 'v2', image: pinned(v2) });
  // The registry notifies in push order: the unrelated push was handled before v2's.
  t.same([...new Set((await deploymentsOf()).map((d) => d.service))], [app], 'only the declared repository deployed');
  Object.assign(images, { v2 });
});
const images: { v2?: TestImage; g1?: TestImage } = {};

t.test('autoDeploy never journals each push and deploys nothing', async (t) => {
  t.same(await deploymentsOf(audit), []);
  const journal = (await http('GET', sched(`/journal?service=${audit}`))).body as { kind: string; message: string }[];
  const recorded = journal.filter((entry) => entry.kind === 'webhook.push-recorded');
  t.equal(recorded.length, 2, 'v1 and v2 recorded');
  t.match(recorded[0]!.message, new RegExp(`registry push of ${registry.host}/${repository}:v2@sha256:[a-f0-9]{64} not deployed: autoDeploy is never`));
});

t.test('replayed envelopes and a late retry of an older push still leave one release per digest', async (t) => {
  const v2 = images.v2!;
  const body = envelope(`replay-${suffix}`, v2, 'v2', new Date().toISOString());
  const replies = await Promise.all(Array.from({ length: 4 }, () => post('/hooks/registry', body, registryHeaders)));
  t.same(replies.map((r) => r.status).every((s) => s === 200 || s === 202), true, 'every replay is acknowledged with 2xx');
  t.equal(replies.filter((r) => r.body.pushes[0].duplicate).length, 3, 'three of four are duplicates of the same event id');
  const releaseV1 = (await http('GET', sched(`/services/${app}/releases/v1`))).body;
  const late = await post('/hooks/registry', envelope(`late-${suffix}`, v1, 'v1', new Date(releaseV1.pushedAt * 1000).toISOString()), registryHeaders);
  t.equal(late.status, 200, 'a late v1 push is answered at once…');
  t.match(late.body.pushes[0].services, [{ service: app, action: 'skipped', reason: /^stale: / }], '…with what it did: nothing, it is stale');
  // The scheduler accepts a service's triggers in order: once this manual one answers, the hooks' were decided.
  const manual = await http('POST', sched('/hooks/deploy'), { serviceName: app, containerRepository: `${registry.host}/${repository}:v2`, pushedAt: 0 });
  t.match(manual.body, { outcome: 'unchanged', release: 'v2' });
  t.equal((await http('GET', sched(`/services/${app}/releases`))).body.length, 2, 'still two releases');
  t.equal((await deploymentsOf(app)).length, 2);
  await runningOn(app, 3, pinned(v2), 5_000);
});

const ghRepository = `wh/gh-${suffix}`;
const ghApp = `wh-gh-${suffix}`;
const gitHubEvent = (image: TestImage, tag: string) =>
  JSON.stringify({
    action: 'published',
    package: {
      id: 1,
      name: ghRepository.split('/')[1],
      namespace: 'wh',
      package_type: 'CONTAINER',
      updated_at: new Date().toISOString(),
      package_version: {
        version: image.digest,
        name: image.digest,
        created_at: '0001-01-01T00:00:00Z',
        container_metadata: { tag: { name: tag, digest: image.digest } },
        package_url: `${ghcr.host}/${ghRepository}:${tag}`,
      },
      registry: { url: `https://${ghcr.host}/wh`, type: 'CONTAINER' },
    },
    repository: { full_name: 'wh/app' },
  });
const sign = (body: string, secret = GH_SECRET) => `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
const gitHubHeaders = (delivery: string, signature: string, event = 'package') => ({ 'content-type': 'application/json', 'x-github-event': event, 'x-github-delivery': delivery, 'x-hub-signature-256': signature });

t.test('GitHub: a signed package event deploys its digest; a bad signature is 401 and changes nothing; redelivery is a duplicate', async (t) => {
  await declare(ghApp, `${ghcr.host}/${ghRepository}`, 2);
  const g1 = await buildTestImage(engine.docker, ghcr.host, ghRepository, 'g1', { label: 'gh' });
  const body = gitHubEvent(g1, 'g1');
  const forged = await post('/hooks/github', body, gitHubHeaders(`bad-${suffix}`, sign(body, 'not-the-secret')));
  t.match(forged, { status: 401, body: { statusCode: 401, error: 'Unauthorized' } });
  const ping = JSON.stringify({ zen: 'Approachable is better than simple.', hook_id: 7 });
  t.match(await post('/hooks/github', ping, gitHubHeaders(`ping-${suffix}`, sign(ping), 'ping')), { status: 200, body: { ignored: 1 } });
  t.same(await deploymentsOf(ghApp), [], 'nothing deployed yet');

  const delivered = await post('/hooks/github', body, gitHubHeaders(`d-${suffix}`, sign(body)));
  t.match(delivered, { status: 202, body: { pushes: [{ services: [{ service: ghApp, action: 'deploying' }] }] } });
  t.ok(delivered.ms < 1000, `acknowledged in ${delivered.ms.toFixed(0)} ms`);
  const again = await post('/hooks/github', body, gitHubHeaders(`d-${suffix}`, sign(body)));
  t.match(again, { status: 200, body: { pushes: [{ duplicate: true }] } });
  const deployment = await succeeded(ghApp, 1);
  t.match(deployment, { trigger: 'github', image: pinned(g1, ghcr.host, ghRepository) });
  await runningOn(ghApp, 2, pinned(g1, ghcr.host, ghRepository));
  t.equal((await deploymentsOf(ghApp)).length, 1);
  Object.assign(images, { g1 });
});

t.test('GitHub: an untagged version of a multi-arch push (package_url ending in ":") is answered 200 with the reason and journaled', async (t) => {
  const g1 = images.g1!;
  const body = gitHubEvent(g1, '');
  t.match(JSON.parse(body), { package: { package_version: { package_url: `${ghcr.host}/${ghRepository}:` } } });
  const reply = await post('/hooks/github', body, gitHubHeaders(`untagged-${suffix}`, sign(body)));
  t.match(reply, { status: 200, body: { pushes: [], ignored: 1, message: `${ghcr.host}/${ghRepository}@${g1.digest} is an untagged version (one platform of a multi-arch image, or a push by digest): only a tagged version deploys` } });
  const journal = (await http('GET', sched('/journal?limit=500'))).body as { kind: string; message: string }[];
  t.match(
    journal.filter((entry) => entry.message.includes(`untagged-${suffix}`)),
    [{ kind: 'webhook.ignored', message: `github package delivery untagged-${suffix} deploys nothing: ${reply.body.message}` }],
  );
  t.equal((await deploymentsOf(ghApp)).length, 1, 'nothing deployed');
});

t.test('Docker Hub: the URL token is required; a push to an autoDeploy never service is journaled', async (t) => {
  const hubApp = `wh-hub-${suffix}`;
  await declare(hubApp, `docker.io/whtest/hub-${suffix}`, 1, 'never');
  const payload = JSON.stringify({ callback_url: `https://registry.hub.docker.com/u/whtest/hub-${suffix}/hook/1/`, push_data: { tag: 'latest', pushed_at: Math.floor(Date.now() / 1000), pusher: 'ci' }, repository: { repo_name: `whtest/hub-${suffix}`, namespace: 'whtest', name: `hub-${suffix}` } });
  const json = { 'content-type': 'application/json' };
  t.match(await post('/hooks/dockerhub', payload, json), { status: 401, body: { message: /token/ } });
  t.match(await post('/hooks/dockerhub?token=wrong', payload, json), { status: 401 });
  const accepted = await post(`/hooks/dockerhub?token=${HUB_TOKEN}`, payload, json);
  t.match(accepted, { status: 200, body: { pushes: [{ image: `docker.io/whtest/hub-${suffix}:latest`, services: [{ service: hubApp, action: 'recorded' }] }] } });
  const journal = (await http('GET', sched(`/journal?service=${hubApp}`))).body as { kind: string }[];
  t.same(journal.map((entry) => entry.kind), ['webhook.push-recorded', 'service.declared'], 'the push is journaled (after the declaration, now journaled too), and nothing deployed');
  t.same(await deploymentsOf(hubApp), []);
});

t.test('oversized bodies are 413, malformed ones 400 naming the problem, unauthenticated ones 401', async (t) => {
  // The scheduler reads an oversized body (up to 8 MiB) before it answers 413 and closes, so the
  // client, still writing, reads the answer rather than a broken pipe: every time.
  const big = JSON.stringify({ events: [], padding: 'x'.repeat(4 * 1024 * 1024) });
  for (let i = 0; i < 5; i += 1) {
    t.match(await post('/hooks/registry', big, registryHeaders), { status: 413, body: { statusCode: 413, error: 'Payload Too Large' } });
    t.match(await post('/hooks/github', big, gitHubHeaders(`big-${suffix}`, sign(big))), { status: 413 });
  }
  t.match(await post('/hooks/registry', '{"events": [', registryHeaders), { status: 400, body: { message: /^the body is not valid JSON/ } });
  t.match(await post('/hooks/registry', '{"events": [{"action": "push"}]}', registryHeaders), { status: 400, body: { message: 'events.0.id is required' } });
  t.match(await post('/hooks/registry', envelope('x', images.v2!, 'v2', 'now'), { 'content-type': 'application/json' }), { status: 401 });
  t.match(await post('/hooks/registry', envelope('x', images.v2!, 'v2', 'now'), { ...registryHeaders, authorization: 'Bearer wrong' }), { status: 401 });
  t.equal((await http('GET', sched(`/services/${app}/releases`))).body.length, 2, 'none of them deployed anything');
});

t.test('pushes a registry delivers late, queued while no scheduler listened, do not override a newer manual deploy', async (t) => {
  // A second registry notifies a port where no scheduler listens yet: its events queue.
  const laterPort = await freePort();
  const late = await startRegistry({ notificationUrl: `http://127.0.0.1:${laterPort}/hooks/registry`, token: TOKEN });
  t.teardown(() => late.stop());
  const repo = `wh/late-${suffix}`;
  const name = `wh-late-${suffix}`;
  await declare(name, `${late.host}/${repo}`, 1);
  const one = await buildTestImage(engine.docker, late.host, repo, '1', { label: 'one' });
  await buildTestImage(engine.docker, late.host, repo, '2', { label: 'two' });
  // Senders give whole seconds: the manual deploy comes a second after both pushes.
  await new Promise((resolve) => setTimeout(resolve, 1100));
  const manual = await http('POST', sched('/hooks/deploy'), { serviceName: name, containerRepository: `${late.host}/${repo}:1`, pushedAt: 0 });
  t.match(manual.body, { outcome: 'created', release: 'v1' });
  await runningOn(name, 1, pinned(one, late.host, repo));
  // Now a scheduler listens where the registry notifies: the queued events arrive, in order.
  const follower = await serveRole('scheduler', laterPort, flags, env);
  roles.push(follower);
  const stale = await waitFor(async () => {
    const journal = (await http('GET', sched(`/journal?service=${name}`))).body as { kind: string; message: string }[];
    const found = journal.find((entry) => entry.kind === 'deployment.stale' && entry.message.includes(`${repo}:2`));
    if (!found) throw new Error(`journal: ${JSON.stringify(journal)}; follower: ${follower.output()}`);
    return found;
  }, 30_000, { what: 'the late push of :2 journaled as stale' });
  t.match(stale.message, /older than the one v1 was deployed for/);
  t.equal((await http('GET', sched(`/services/${name}/releases`))).body.length, 1, 'no release was made for the late push');
  await runningOn(name, 1, pinned(one, late.host, repo));
});

t.test('no secret appears in the scheduler output', async (t) => {
  const output = scheduler.output();
  for (const secret of [TOKEN, HUB_TOKEN, GH_SECRET]) t.notOk(output.includes(secret));
});
