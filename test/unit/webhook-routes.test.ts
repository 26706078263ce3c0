import t from 'tap';
import { createHmac } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { Writable } from 'node:stream';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { pino } from 'pino';
import type { FastifyBaseLogger } from 'fastify';
import { createRoleServer, type RoleServer } from '../../src/http/server.js';
import { OVERSIZED_BODY_DISCARD } from '../../src/http/oversized-body.js';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import { serviceKey, webhookDeliveryPrefix } from '../../src/store/keys.js';
import { readJournal } from '../../src/store/records/journal.js';
import { registerWebhooks, type WebhookOptions } from '../../src/roles/scheduler/webhooks/routes.js';
import type { DeployTrigger } from '../../src/roles/scheduler/deploys/deploy.js';
import type { DeployReply } from '../../src/schemas/release.js';
import type { WebhookSecrets } from '../../src/config.js';
import { waitFor } from '../harness/wait.js';

// The hooks' HTTP behaviour (authentication, parsing, dedup, background deploys) on an embedded
// store, with a deployer that records what it is asked: no registry, Docker or network.

const dir = mkdtempSync(join(tmpdir(), 'webhook-routes-'));
const store = await EmbeddedStore.open(dir);
t.teardown(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const SECRETS: Required<WebhookSecrets> = { registryToken: 'reg-t0ken-value', dockerHubToken: 'hub-t0ken-value', gitHubSecret: 'gh-s3cret-value' };
const digest = (c: string) => `sha256:${c.repeat(64)}`;

await store.put(serviceKey('web'), JSON.stringify({ name: 'web', containerImage: '127.0.0.1:5000/team/app', autoDeploy: 'always' }));
await store.put(serviceKey('audit'), JSON.stringify({ name: 'audit', containerImage: '127.0.0.1:5000/team/app', autoDeploy: 'never' }));
await store.put(serviceKey('hub'), JSON.stringify({ name: 'hub', containerImage: 'team/hubapp', autoDeploy: 'always' }));
await store.put(serviceKey('gh'), JSON.stringify({ name: 'gh', containerImage: 'ghcr.io/owner/app', autoDeploy: 'always' }));

interface Harness {
  server: RoleServer;
  triggers: DeployTrigger[];
  logs: () => string;
  failNext: (message: string) => void;
}

/** One server per set-up (creating one takes a while): each test starts with an empty trigger list. */
const harnesses = new Map<string, Promise<Harness>>();
async function harness(secrets: WebhookSecrets, listenHost = '127.0.0.1', extra: Partial<WebhookOptions> = {}): Promise<Harness> {
  const key = JSON.stringify([secrets, listenHost, extra]);
  if (!harnesses.has(key)) harnesses.set(key, startHarness(secrets, listenHost, extra));
  const started = await harnesses.get(key)!;
  started.triggers.length = 0;
  return started;
}

async function startHarness(secrets: WebhookSecrets, listenHost: string, extra: Partial<WebhookOptions>): Promise<Harness> {
  let logText = '';
  const sink = new Writable({ write: (chunk, _encoding, done) => ((logText += String(chunk)), done()) });
  const log = pino({ level: 'debug' }, sink) as unknown as FastifyBaseLogger;
  const server = await createRoleServer({ role: 'scheduler', logger: log, access: { mode: 'none', listenerLoopback: true }, readiness: async () => ({}) });
  const triggers: DeployTrigger[] = [];
  let failure: string | undefined;
  const deployer = {
    deploy: async (trigger: DeployTrigger): Promise<DeployReply> => {
      triggers.push(trigger);
      if (failure) {
        const message = failure;
        failure = undefined;
        throw new Error(message);
      }
      return { statusCode: 200, outcome: 'created', service: trigger.serviceName, release: 'v1', version: 1, deployment: 'd1', image: trigger.containerRepository, message: 'deploying' };
    },
  };
  await registerWebhooks(server, { deployer, store, log, secrets, listenHost, ...extra });
  t.teardown(() => server.close());
  return { server, triggers, logs: () => logText, failNext: (message) => (failure = message) };
}

const envelope = (id: string, tag = 'v2', d = digest('a')) => ({
  events: [
    { id: `${id}-blob`, timestamp: '2026-01-01T00:00:00Z', action: 'push', target: { mediaType: 'application/octet-stream', digest: digest('f'), repository: 'team/app', url: 'http://127.0.0.1:5000/v2/team/app/blobs/x' }, request: { host: '127.0.0.1:5000' } },
    { id, timestamp: '2026-01-01T00:00:01Z', action: 'push', target: { mediaType: 'application/vnd.docker.distribution.manifest.v2+json', digest: d, repository: 'team/app', tag, url: 'http://127.0.0.1:5000/v2/team/app/manifests/x' }, request: { host: '127.0.0.1:5000' } },
  ],
});
const EVENTS = 'application/vnd.docker.distribution.events.v1+json';
const settle = () => new Promise((resolve) => setTimeout(resolve, 50));

t.test('the registry hook needs its bearer token: missing or wrong is 401 and nothing happens', async (t) => {
  const { server, triggers, logs } = await harness(SECRETS);
  const body = JSON.stringify(envelope('ev-auth'));
  const missing = await server.inject({ method: 'POST', url: '/hooks/registry', headers: { 'content-type': EVENTS }, payload: body });
  t.equal(missing.statusCode, 401);
  t.match(missing.json(), { statusCode: 401, error: 'Unauthorized', message: /Authorization: Bearer/ });
  t.equal(missing.headers['www-authenticate'], 'Bearer realm="platform"');
  const wrong = await server.inject({ method: 'POST', url: '/hooks/registry', headers: { 'content-type': EVENTS, authorization: 'Bearer nope' }, payload: body });
  t.match(wrong, { statusCode: 401 });
  await settle();
  t.same(triggers, []);
  t.equal((await store.list(webhookDeliveryPrefix)).length, 0, 'no delivery recorded');
  t.notMatch(logs(), SECRETS.registryToken);
});

t.test('an authenticated registry push deploys the pushed digest in the background and journals autoDeploy never', async (t) => {
  const { server, triggers, logs } = await harness(SECRETS);
  const reply = await server.inject({ method: 'POST', url: '/hooks/registry', headers: { 'content-type': `${EVENTS}; charset=utf-8`, authorization: `Bearer ${SECRETS.registryToken}` }, payload: JSON.stringify(envelope('ev-1')) });
  t.equal(reply.statusCode, 202);
  t.equal(reply.headers['www-authenticate'], undefined);
  t.match(reply.json(), {
    statusCode: 202,
    ignored: 1,
    pushes: [{ event: 'ev-1', image: `127.0.0.1:5000/team/app:v2@${digest('a')}`, duplicate: false, services: [{ service: 'audit', action: 'recorded' }, { service: 'web', action: 'deploying' }] }],
  });
  await settle();
  t.same(triggers, [{ serviceName: 'web', containerRepository: `127.0.0.1:5000/team/app:v2@${digest('a')}`, pushedAt: Date.parse('2026-01-01T00:00:01Z') / 1000, triggeredAt: Date.parse('2026-01-01T00:00:01Z'), trigger: 'registry' }]);
  const journal = await readJournal(store, { limit: 10, service: 'audit' });
  t.match(journal[0], { kind: 'webhook.push-recorded', message: /registry push of 127\.0\.0\.1:5000\/team\/app:v2@sha256:a+ not deployed: autoDeploy is never/ });
  t.notMatch(logs() + reply.body, SECRETS.registryToken, 'the token is neither logged nor echoed');
});

t.test('a repeated event id is acknowledged as a duplicate and deploys nothing again', async (t) => {
  const { server, triggers } = await harness(SECRETS);
  const post = () => server.inject({ method: 'POST', url: '/hooks/registry', headers: { 'content-type': 'application/json', authorization: `Bearer ${SECRETS.registryToken}` }, payload: JSON.stringify(envelope('ev-dup', 'v3', digest('b'))) });
  const replies = await Promise.all([post(), post(), post()]);
  t.same(replies.map((r) => r.statusCode).sort(), [200, 200, 202]);
  t.equal(replies.filter((r) => r.json().pushes[0].duplicate).length, 2);
  await settle();
  t.equal(triggers.length, 1);
});

t.test('a deploy that fails in the background is journaled and the delivery forgotten, so a redelivery retries', async (t) => {
  const { server, triggers, failNext } = await harness(SECRETS);
  failNext('registry 127.0.0.1:5000 is unreachable');
  const post = () => server.inject({ method: 'POST', url: '/hooks/registry', headers: { authorization: `Bearer ${SECRETS.registryToken}`, 'content-type': EVENTS }, payload: JSON.stringify(envelope('ev-fail', 'v4', digest('c'))) });
  t.equal((await post()).statusCode, 202, 'acknowledged before the deploy ran');
  // The delivery is forgotten before the line is journaled: once the line is there, a redelivery counts.
  const journal = await waitFor(async () => {
    const entries = await readJournal(store, { limit: 10, service: 'web' });
    return entries[0]?.kind === 'webhook.deploy-failed' ? entries : undefined;
  }, 10_000, { what: 'the failed deploy in the journal' });
  t.match(journal[0], { kind: 'webhook.deploy-failed', message: /registry push of .*:v4@.* was not deployed: registry 127\.0\.0\.1:5000 is unreachable/ });
  t.match((await post()).json(), { pushes: [{ duplicate: false }] }, 'the redelivery is handled again');
  await waitFor(() => triggers.length === 2, 10_000, { what: 'the redelivery to trigger a deploy' });
  t.equal(triggers.length, 2);
});

t.test('an unrelated repository gets 200 and changes nothing', async (t) => {
  const { server, triggers } = await harness(SECRETS);
  const body = envelope('ev-other');
  body.events[1]!.target.repository = 'team/unrelated';
  const reply = await server.inject({ method: 'POST', url: '/hooks/registry', headers: { authorization: `Bearer ${SECRETS.registryToken}` }, payload: body });
  t.equal(reply.statusCode, 200);
  t.match(reply.json(), { pushes: [{ services: [] }], message: /no declared service uses this repository/ });
  await settle();
  t.same(triggers, []);
});

t.test('without a secret, a loopback listener accepts local calls only; any other listener answers 403', async (t) => {
  const open = await harness({});
  // Over a real loopback connection: whether its caller is a unit is asked of the kernel's sockets, which an injected call has none of.
  const url = await open.server.listen({ host: '127.0.0.1', port: 0 });
  const local = await fetch(`${url}/hooks/registry`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(envelope('ev-open', 'v5', digest('d'))) });
  t.equal(local.status, 202, 'a local unauthenticated call is accepted');
  t.match(open.logs(), /webhooks without a secret: POST \/hooks\/registry accepts unauthenticated calls from this machine: set PLATFORM_REGISTRY_WEBHOOK_TOKEN/);
  const proxied = await open.server.inject({ method: 'POST', url: '/hooks/registry', headers: { 'x-forwarded-for': '203.0.113.9' }, payload: envelope('ev-open2') });
  t.match(proxied.json(), { statusCode: 403, message: /accepts calls from other hosts only with a secret: set PLATFORM_REGISTRY_WEBHOOK_TOKEN/ }, 'a call relayed by a proxy is not local');
  const injected = await open.server.inject({ method: 'POST', url: '/hooks/registry', payload: envelope('ev-open3') });
  t.equal(injected.statusCode, 403, 'a caller whose process cannot be identified is not local');

  const exposed = await harness({}, '0.0.0.0');
  for (const [url, setting] of [['/hooks/registry', 'PLATFORM_REGISTRY_WEBHOOK_TOKEN'], ['/hooks/dockerhub', 'PLATFORM_DOCKERHUB_WEBHOOK_TOKEN'], ['/hooks/github', 'PLATFORM_GITHUB_WEBHOOK_SECRET']] as const) {
    const reply = await exposed.server.inject({ method: 'POST', url, payload: {} });
    t.match(reply.json(), { statusCode: 403, error: 'Forbidden', message: new RegExp(`set ${setting}`) }, url);
  }
  t.match(exposed.logs(), /POST \/hooks\/github answers 403 until a secret is set/);
});

t.test('Docker Hub: the URL token is required; the tag is deployed and resolved by the scheduler', async (t) => {
  const { server, triggers, logs } = await harness(SECRETS);
  const payload = { callback_url: 'https://registry.hub.docker.com/u/team/hubapp/hook/x/', push_data: { tag: 'v7', pushed_at: 1700000000, pusher: 'ci' }, repository: { repo_name: 'team/hubapp', namespace: 'team' } };
  t.equal((await server.inject({ method: 'POST', url: '/hooks/dockerhub', payload })).statusCode, 401);
  t.equal((await server.inject({ method: 'POST', url: '/hooks/dockerhub?token=wrong', payload })).statusCode, 401);
  const reply = await server.inject({ method: 'POST', url: `/hooks/dockerhub?token=${SECRETS.dockerHubToken}`, payload });
  t.equal(reply.statusCode, 202);
  await settle();
  t.same(triggers, [{ serviceName: 'hub', containerRepository: 'docker.io/team/hubapp:v7', pushedAt: 1700000000, triggeredAt: 1700000000_000, trigger: 'dockerhub' }]);
  t.notMatch(logs() + reply.body, SECRETS.dockerHubToken);
});

const githubBody = (tag: string) =>
  JSON.stringify({
    action: 'published',
    package: { name: 'app', namespace: 'owner', package_type: 'CONTAINER', updated_at: '2026-02-01T00:00:00Z', package_version: { version: digest('e'), container_metadata: { tag: { name: tag, digest: digest('e') } }, package_url: `ghcr.io/owner/app:${tag}` } },
  });
const sign = (body: string, secret = SECRETS.gitHubSecret) => `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;

t.test('GitHub: a valid signature deploys, a bad or missing one is 401; the delivery id deduplicates', async (t) => {
  const { server, triggers } = await harness(SECRETS);
  const body = githubBody('v8');
  const headers = (delivery: string, signature?: string) => ({ 'content-type': 'application/json', 'x-github-event': 'package', 'x-github-delivery': delivery, ...(signature ? { 'x-hub-signature-256': signature } : {}) });
  t.match((await server.inject({ method: 'POST', url: '/hooks/github', headers: headers('g1'), payload: body })).json(), { statusCode: 401, message: /X-Hub-Signature-256 is missing/ });
  t.match((await server.inject({ method: 'POST', url: '/hooks/github', headers: headers('g1', sign(body, 'wrong')), payload: body })).json(), { statusCode: 401, message: /does not match/ });
  t.match((await server.inject({ method: 'POST', url: '/hooks/github', headers: headers('g1', sign(body)), payload: body.replace('v8', 'v9') })).json(), { statusCode: 401 }, 'a changed body fails');
  t.match((await server.inject({ method: 'POST', url: '/hooks/github', headers: headers('g1', sign(body)) })).json(), { statusCode: 401 }, 'no body, no signature check, no entry');
  await settle();
  t.same(triggers, []);

  const first = await server.inject({ method: 'POST', url: '/hooks/github', headers: headers('g1', sign(body)), payload: body });
  t.equal(first.statusCode, 202);
  const again = await server.inject({ method: 'POST', url: '/hooks/github', headers: headers('g1', sign(body)), payload: body });
  t.match(again.json(), { statusCode: 200, pushes: [{ duplicate: true }] }, 'a redelivery with the same X-GitHub-Delivery');
  await settle();
  t.same(triggers, [{ serviceName: 'gh', containerRepository: `ghcr.io/owner/app:v8@${digest('e')}`, pushedAt: Date.parse('2026-02-01T00:00:00Z') / 1000, triggeredAt: Date.parse('2026-02-01T00:00:00Z'), trigger: 'github' }]);
});

t.test('GitHub: form-encoded deliveries are verified on their raw bytes too; ping answers 200', async (t) => {
  const { server, triggers } = await harness(SECRETS);
  const form = `payload=${encodeURIComponent(githubBody('v10'))}`;
  const reply = await server.inject({ method: 'POST', url: '/hooks/github', headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-github-event': 'package', 'x-github-delivery': 'g-form', 'x-hub-signature-256': sign(form) }, payload: form });
  t.equal(reply.statusCode, 202);
  const ping = JSON.stringify({ zen: 'Design for failure.', hook_id: 1 });
  const pong = await server.inject({ method: 'POST', url: '/hooks/github', headers: { 'content-type': 'application/json', 'x-github-event': 'ping', 'x-github-delivery': 'g-ping', 'x-hub-signature-256': sign(ping) }, payload: ping });
  t.match(pong, { statusCode: 200 });
  t.match(pong.json(), { message: /ping/, pushes: [], ignored: 1 });
  await settle();
  t.equal(triggers.length, 1);
});

const postGitHub = (server: RoleServer, event: string, delivery: string, body: string) =>
  server.inject({ method: 'POST', url: '/hooks/github', headers: { 'content-type': 'application/json', 'x-github-event': event, 'x-github-delivery': delivery, 'x-hub-signature-256': sign(body) }, payload: body });
const journaled = async (delivery: string) => (await readJournal(store, { limit: 1000 })).filter((entry) => entry.message.includes(` delivery ${delivery} `));

interface GitHubExample {
  source: string;
  event: string;
  body: Record<string, unknown>;
}

/** GitHub's published example payloads (@octokit/webhooks-examples) of the events the hook reads, for every GitHub version there. */
function gitHubExamples(): GitHubExample[] {
  const root = dirname(createRequire(import.meta.url).resolve('@octokit/webhooks-examples/package.json'));
  const examples: GitHubExample[] = [];
  for (const version of readdirSync(root, { withFileTypes: true }).filter((entry) => entry.isDirectory())) {
    const webhooks = JSON.parse(readFileSync(join(root, version.name, 'index.json'), 'utf8')) as { name: string; examples: Record<string, unknown>[] }[];
    for (const webhook of webhooks.filter((w) => w.name === 'package' || w.name === 'registry_package')) {
      webhook.examples.forEach((body, index) => examples.push({ source: `${version.name} ${webhook.name} example ${index}`, event: webhook.name, body }));
    }
  }
  return examples;
}

/**
 * An example as either event (GitHub sends the same package under `package` or `registry_package`),
 * as published and as GHCR types containers (one example is a container version typed npm).
 */
function variantsOf({ source, event, body }: GitHubExample): { name: string; event: string; payload: Record<string, unknown> }[] {
  const { package: _package, registry_package: _registryPackage, ...rest } = body;
  const pkg = body[event] as Record<string, unknown>;
  return ['package', 'registry_package'].flatMap((key) => [
    { name: `${source} as ${key}`, event: key, payload: { ...rest, [key]: pkg } },
    { name: `${source} as ${key}, typed CONTAINER`, event: key, payload: { ...rest, [key]: { ...pkg, package_type: 'CONTAINER' } } },
  ]);
}

t.test("GitHub: every package event GitHub publishes as an example is answered 2xx; those that deploy nothing say why and are journaled", async (t) => {
  const { server, triggers } = await harness(SECRETS);
  const examples = gitHubExamples();
  t.ok(examples.length >= 3, `${examples.length} examples`);
  let count = 0;
  for (const variant of examples.flatMap(variantsOf)) {
    const delivery = `g-example-${(count += 1)}`;
    const reply = await postGitHub(server, variant.event, delivery, JSON.stringify(variant.payload));
    t.ok(reply.statusCode === 200 || reply.statusCode === 202, `${variant.name}: ${reply.statusCode} ${reply.body}`);
    if (reply.statusCode !== 200 || reply.json().pushes.length > 0) continue;
    const { message } = reply.json() as { message: string };
    t.match(await journaled(delivery), [{ kind: 'webhook.ignored', message: `github ${variant.event} delivery ${delivery} deploys nothing: ${message}` }], `${variant.name}: ${message}`);
  }
  await settle();
  t.same(triggers, [], 'none of them is a tagged container version');
});

t.test("GitHub: an untagged version (package_url ghcr.io/owner/name:) is answered 200 with the reason and journaled; its tagged index deploys", async (t) => {
  const { server, triggers, logs } = await harness(SECRETS);
  const version = (tag: string, d: string) => ({ version: d, name: d, created_at: '2026-04-01T08:00:00Z', updated_at: '2026-04-01T08:00:00Z', container_metadata: { tag: { name: tag, digest: d } }, package_url: `ghcr.io/owner/app:${tag}` });
  const event = (tag: string, d: string) => JSON.stringify({ action: 'published', package: { name: 'app', namespace: 'owner', package_type: 'CONTAINER', package_version: version(tag, d) } });
  const child = await postGitHub(server, 'package', 'g-untagged', event('', digest('1')));
  t.equal(child.statusCode, 200);
  const reason = `ghcr.io/owner/app@${digest('1')} is an untagged version (one platform of a multi-arch image, or a push by digest): only a tagged version deploys`;
  t.same(child.json(), { statusCode: 200, message: reason, pushes: [], ignored: 1 });
  t.match(await journaled('g-untagged'), [{ kind: 'webhook.ignored', message: `github package delivery g-untagged deploys nothing: ${reason}` }]);

  const index = await postGitHub(server, 'registry_package', 'g-index', event('v11', digest('2')).replace('"package"', '"registry_package"'));
  t.equal(index.statusCode, 202);
  await settle();
  t.same(triggers, [{ serviceName: 'gh', containerRepository: `ghcr.io/owner/app:v11@${digest('2')}`, pushedAt: Date.parse('2026-04-01T08:00:00Z') / 1000, triggeredAt: Date.parse('2026-04-01T08:00:00Z'), trigger: 'github' }]);
  t.same(await journaled('g-index'), [], 'a deployable event is not journaled as ignored');
  t.notMatch(logs() + JSON.stringify(await readJournal(store, { limit: 1000 })), SECRETS.gitHubSecret);
});

t.test('GitHub: only a body that is not a JSON object is a 400; any signed object is answered 200', async (t) => {
  const { server } = await harness(SECRETS);
  for (const body of ['[]', '"published"', 'null', '42', '{"action": "published"']) {
    t.match((await postGitHub(server, 'package', 'g-400', body)).json(), { statusCode: 400 }, body);
  }
  for (const [n, body] of ['{}', '{"action": "published", "package": {"package_version": null}}', '{"action": 7, "package": []}'].entries()) {
    const reply = await postGitHub(server, 'package', `g-object-${n}`, body);
    t.equal(reply.statusCode, 200, `${body}: ${reply.body}`);
    t.equal((await journaled(`g-object-${n}`)).length, 1);
  }
  t.equal(await journaled('g-400').then((entries) => entries.length), 0, 'a 400 is not journaled');
});

t.test('malformed bodies are 400 naming the problem; oversized ones 413', async (t) => {
  const { server } = await harness(SECRETS, '127.0.0.1', { bodyLimit: 4096 });
  const auth = { authorization: `Bearer ${SECRETS.registryToken}` };
  const post = (payload: string, type = EVENTS) => server.inject({ method: 'POST', url: '/hooks/registry', headers: { ...auth, 'content-type': type }, payload });
  t.match((await post('{"events": [')).json(), { statusCode: 400, message: /^the body is not valid JSON: / });
  t.match((await post('')).json(), { statusCode: 400, message: /body is empty/ });
  t.match((await post('{"events": {}}')).json(), { statusCode: 400, message: /events must be an array/ });
  t.match((await post('{}')).json(), { statusCode: 400, message: 'events is required' });
  t.match((await post(JSON.stringify({ events: [{ id: 'x', action: 'push', target: { mediaType: 'application/vnd.oci.image.manifest.v1+json', repository: 'team/app', digest: 'nope' }, request: { host: 'h:1' } }] }))).json(), { statusCode: 400, message: /events\.0\.target\.digest must be a digest/ });
  const huge = JSON.stringify({ events: [], padding: 'x'.repeat(5000) });
  t.match((await post(huge)).json(), { statusCode: 413, error: 'Payload Too Large' });
  const hub = await server.inject({ method: 'POST', url: `/hooks/dockerhub?token=${SECRETS.dockerHubToken}`, payload: { push_data: { tag: 'v1' }, repository: { repo_name: 'Bad Name' } } });
  t.match(hub.json(), { statusCode: 400, message: /repository\.repo_name must be a repository/ });
  const body = JSON.stringify({ action: 'published' });
  const noHeaders = await server.inject({ method: 'POST', url: '/hooks/github', headers: { 'content-type': 'application/json', 'x-hub-signature-256': sign(body) }, payload: body });
  t.match(noHeaders.json(), { statusCode: 400, message: /x-github-event is required/ });
});

t.test('a webhook body with a __proto__ or constructor.prototype key is a 400 naming the rule, and changes nothing', async (t) => {
  const { server, triggers } = await harness(SECRETS);
  const auth = { authorization: `Bearer ${SECRETS.registryToken}` };
  const bodies = [
    '{"__proto__": {"polluted": true}, "events": []}',
    '{"events": [{"id": "p1", "action": "push", "target": {"__proto__": {"tag": "evil"}}}]}',
    '{"constructor": {"prototype": {"polluted": true}}, "events": []}',
  ];
  for (const payload of bodies) {
    const reply = await server.inject({ method: 'POST', url: '/hooks/registry', headers: { ...auth, 'content-type': EVENTS }, payload });
    t.match(reply.json(), { statusCode: 400, error: 'Bad Request', message: /^the body holds a __proto__ or constructor\.prototype key: such keys are refused/ }, payload);
  }
  const hub = await server.inject({ method: 'POST', url: `/hooks/dockerhub?token=${SECRETS.dockerHubToken}`, headers: { 'content-type': 'application/json' }, payload: bodies[0] });
  t.match(hub.json(), { statusCode: 400, message: /__proto__ or constructor\.prototype/ });
  const github = await postGitHub(server, 'package', 'g-proto', bodies[2]!);
  t.match(github.json(), { statusCode: 400, message: /__proto__ or constructor\.prototype/ }, 'GitHub too: the body is no object the hook may read');
  t.equal(({} as Record<string, unknown>).polluted, undefined);
  await settle();
  t.same(triggers, []);
});

t.test('a registry push whose target.tag is no tag is a 400 naming the field and the rule, and deploys nothing', async (t) => {
  const { server, triggers } = await harness(SECRETS);
  for (const tag of ['../../../etc', 'v1@sha256:x', '-rf', 'x'.repeat(129), 'a b']) {
    const reply = await server.inject({ method: 'POST', url: '/hooks/registry', headers: { authorization: `Bearer ${SECRETS.registryToken}`, 'content-type': EVENTS }, payload: JSON.stringify(envelope(`ev-tag-${tag.length}`, tag)) });
    t.match(reply.json(), { statusCode: 400, message: /^events\.1\.target\.tag must be a tag: up to 128 letters, digits/ }, tag);
  }
  await settle();
  t.same(triggers, []);
});

/** The harness's server on a real socket (inject never writes to one), for what clients see of a connection. */
async function listening(server: RoleServer): Promise<number> {
  if (!server.server.listening) await server.listen({ host: '127.0.0.1', port: 0 });
  return (server.server.address() as AddressInfo).port;
}

/** A raw HTTP/1.1 exchange: what the server sent, and the error the socket met, if any, until the server closed it. */
function rawExchange(port: number): { socket: Socket; answer: Promise<{ text: string; error?: Error }> } {
  const socket = connect(port, '127.0.0.1');
  let text = '';
  let error: Error | undefined;
  socket.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
  socket.on('error', (e) => (error = e));
  return { socket, answer: new Promise((resolve) => socket.on('close', () => resolve({ text, ...(error ? { error } : {}) }))) };
}

t.test('an oversized body is read to its end (up to a bound) before the 413, so the client reads the answer instead of a broken pipe', async (t) => {
  const { server } = await harness(SECRETS, '127.0.0.1', { bodyLimit: 4096 });
  const port = await listening(server);
  const body = Buffer.alloc(256 * 1024, 'x');
  const { socket, answer } = rawExchange(port);
  let answered = false;
  void answer.then(() => (answered = true));
  socket.write(`POST /hooks/registry HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${SECRETS.registryToken}\r\nContent-Type: ${EVENTS}\r\nContent-Length: ${body.length}\r\n\r\n`);
  socket.write(body.subarray(0, body.length / 2));
  await new Promise((resolve) => setTimeout(resolve, 300));
  t.notOk(answered || socket.bytesRead > 0, 'no answer while the body is still arriving');
  socket.write(body.subarray(body.length / 2));
  const { text, error } = await answer;
  t.equal(error, undefined, 'no EPIPE or reset');
  t.match(text, /^HTTP\/1\.1 413 Payload Too Large\r\n/);
  t.match(text, /\r\nconnection: close\r\n/i, 'and the connection closes after it');
  t.match(JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4)), { statusCode: 413, error: 'Payload Too Large' });

  // What the CI run did, several times over: fetch writing a body of some MiB reads its 413.
  const big = JSON.stringify({ events: [], padding: 'x'.repeat(2 * 1024 * 1024) });
  for (let i = 0; i < 10; i += 1) {
    const response = await fetch(`http://127.0.0.1:${port}/hooks/registry`, { method: 'POST', headers: { 'content-type': EVENTS, authorization: `Bearer ${SECRETS.registryToken}` }, body: big });
    t.equal(response.status, 413, `fetch ${i + 1}`);
    await response.body?.cancel();
  }

  // Beyond the bound there is no reading it all: a body announced larger is refused at once.
  const beyond = rawExchange(port);
  beyond.socket.write(`POST /hooks/github HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${OVERSIZED_BODY_DISCARD.bytes + 1}\r\n\r\n{`);
  t.match((await beyond.answer).text, /^HTTP\/1\.1 413 Payload Too Large\r\n/);
  t.ok(beyond.socket.bytesWritten < 1024, 'closed with the body unsent');
});

