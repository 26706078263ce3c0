import t from 'tap';
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { execFile } from 'node:child_process';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { startEtcd } from '../harness/etcd.js';
import { startDockerd } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { http, platformBin, serveRole, type PlatformProcess } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';
import type { NotificationEvent, NotifyDelivery } from '../../src/schemas/notification.js';

// Outbound notifications on real parts (etcd, dockerd, the registry, an agent and two
// schedulers), delivered to receivers in this process: a receiver that fails its first two
// deliveries still gets every event once by id, signed; real deploys produce every deployment
// event and unit.failed; killing the leading scheduler while deliveries are being retried loses
// none; a redirect is not followed, and an endpoint that never takes a delivery is given up.

const TTL = 3;
/** The schedulers' give-up window, short so a test can watch a delivery be given up. */
const GIVE_UP_SECONDS = 45;
const etcd = await startEtcd();
const registry = await startRegistry();
const engine = await startDockerd();
const repository = `notify/web-${randomBytes(3).toString('hex')}`;
const [good, crash] = await Promise.all([
  buildTestImage(engine.docker, registry.host, repository, 'good'),
  buildTestImage(engine.docker, registry.host, repository, 'crash', { variant: 'crash' }),
]);
const flags = ['--etcd', etcd.url, '--announce-ttl', String(TTL)];
// The receivers listen on loopback, which the destination rule allows only when the operator names it.
const allowReceivers = ['--allowed-notification-destination', '127.0.0.1'];
const schedulerFlags = [...flags, ...allowReceivers, '--notify-retry', '1s', '--notify-give-up', `${GIVE_UP_SECONDS}s`, '--notify-timeout', '2'];
type Role = PlatformProcess & { url: string };
const agent = await serveRole('agent', await freePort(), [...flags, '--network', 'host', '--machine-id', 'm1', '--stop-grace', '1', '--drain-seconds', '0'], { DOCKER_HOST: engine.dockerHost });
const directory = await serveRole('directory', await freePort(), flags);
const orchestrator = await serveRole('orchestrator', await freePort(), [...flags, ...allowReceivers]);
const schedulers: Role[] = [await serveRole('scheduler', await freePort(), schedulerFlags), await serveRole('scheduler', await freePort(), schedulerFlags)];

/** A webhook receiver as a careful user writes one: it checks the signature and drops an event id it has seen. */
class Receiver {
  secret = '';
  /** Deliveries still to answer 500, and whether to answer every one so. */
  failNext = 0;
  failAll = false;
  readonly requests: { id: string; status: number; attempt: string | undefined }[] = [];
  readonly events = new Map<string, NotificationEvent>();
  /** 2xx answers to an id already acknowledged: the sender sent again what it knew was delivered. */
  repeats = 0;
  badSignatures = 0;
  headerMismatches = 0;
  private constructor(
    private readonly server: Server,
    readonly url: string,
  ) {}

  static async start(path = '/hook'): Promise<Receiver> {
    const port = await freePort();
    const server = createServer();
    const receiver = new Receiver(server, `http://127.0.0.1:${port}${path}`);
    server.on('request', (request: IncomingMessage, response: ServerResponse) => void receiver.handle(request).then((status) => response.writeHead(status).end()));
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    return receiver;
  }

  private async handle(request: IncomingMessage): Promise<number> {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    const expected = Buffer.from(`sha256=${createHmac('sha256', this.secret).update(body).digest('hex')}`);
    const given = Buffer.from(String(request.headers['x-platform-signature-256'] ?? ''));
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
      this.badSignatures += 1;
      return 401;
    }
    const event = JSON.parse(body.toString()) as NotificationEvent;
    if (request.headers['x-platform-event-id'] !== event.id || request.headers['x-platform-event'] !== event.event) this.headerMismatches += 1;
    const attempt = request.headers['x-platform-delivery-attempt'] as string | undefined;
    if (this.failAll || this.failNext > 0) {
      this.failNext = Math.max(0, this.failNext - 1);
      this.requests.push({ id: event.id, status: 500, attempt });
      return 500;
    }
    this.requests.push({ id: event.id, status: 200, attempt });
    if (this.events.has(event.id)) this.repeats += 1;
    else this.events.set(event.id, event);
    return 200;
  }

  /** The event of `kind` about `deployment` (or, for a unit, about `service`), once received. */
  find(kind: string, match: (event: NotificationEvent) => boolean): NotificationEvent | undefined {
    return [...this.events.values()].find((event) => event.event === kind && match(event));
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

const receiver = await Receiver.start('/hook/path-secret-0123');
// Answers every delivery with a redirect to another listener, which must never be reached.
const elsewherePort = await freePort();
let elsewhereHits = 0;
const elsewhere = createServer((_request, response) => {
  elsewhereHits += 1;
  response.writeHead(200).end();
});
await new Promise<void>((resolve) => elsewhere.listen(elsewherePort, '127.0.0.1', resolve));
const redirectPort = await freePort();
const redirecting = createServer((_request, response) => response.writeHead(302, { location: `http://127.0.0.1:${elsewherePort}/stolen` }).end());
await new Promise<void>((resolve) => redirecting.listen(redirectPort, '127.0.0.1', resolve));

t.teardown(async () => {
  await Promise.all([...schedulers, agent, directory, orchestrator].map((role) => role.stop()));
  await Promise.all([receiver.close(), new Promise((resolve) => elsewhere.close(resolve)), new Promise((resolve) => redirecting.close(resolve))]);
  await Promise.all([registry.stop(), etcd.stop()]);
  await engine.stop();
});

const orch = (path: string) => `${orchestrator.url}${path}`;

async function declare(name: string): Promise<void> {
  const created = await http('POST', orch('/services'), { name, description: 'notify', containerRepository: `${registry.host}/${repository}`, loadBalanced: false, publicFacing: false, numInstances: 1 });
  if (created.status !== 201) throw new Error(JSON.stringify(created.body));
}

async function deploy(service: string, image: string): Promise<string> {
  const reply = await http('POST', orch(`/services/${service}/deploy`), { containerRepository: image });
  if (reply.status !== 200) throw new Error(JSON.stringify(reply.body));
  return reply.body.deployment as string;
}

async function finished(id: string): Promise<{ state: string; reason?: string }> {
  return waitFor(async () => {
    const deployment = (await http('GET', orch(`/deployments/${id}`))).body;
    return ['succeeded', 'failed', 'reverted', 'superseded'].includes(deployment.state) ? deployment : undefined;
  }, 90_000, { what: `deployment ${id} to end` });
}

const about = (deployment: string) => (event: NotificationEvent) => event.details.deployment === deployment;

async function received(kind: string, match: (event: NotificationEvent) => boolean, timeoutMs = 60_000): Promise<NotificationEvent> {
  return waitFor(() => receiver.find(kind, match), timeoutMs, { what: `${kind} at the receiver` });
}

const deliveries = async (query = ''): Promise<NotifyDelivery[]> => (await http('GET', orch(`/notifications/deliveries${query}`))).body;

let redirectEndpoint = '';

t.test('endpoints: bad URLs are refused naming the rule; the secret is shown once and never listed', async (t) => {
  const ftp = await http('POST', orch('/notifications/endpoints'), { url: 'ftp://example.com/hook' });
  t.equal(ftp.status, 400);
  t.match(ftp.body.message, /^url must be an http:\/\/ or https:\/\/ URL/);
  const credentials = await http('POST', orch('/notifications/endpoints'), { url: 'https://user:pw@example.com/hook' });
  t.equal(credentials.status, 400);
  t.match(credentials.body.message, /^url must be .*without credentials/);
  const event = await http('POST', orch('/notifications/endpoints'), { url: receiver.url, events: ['deployment.exploded'] });
  t.equal(event.status, 400);
  t.match(event.body.message, /^events\.0 must be one of deployment\.started/, JSON.stringify(event.body));
  t.same((await http('GET', orch('/notifications/endpoints'))).body, [], 'nothing was added');

  const added = await http('POST', orch('/notifications/endpoints'), { url: receiver.url });
  t.equal(added.status, 201);
  t.match(added.body, { endpoint: { id: /^[0-9a-f]{12}$/, url: receiver.url, createdAt: String }, secret: /^whsec_[A-Za-z0-9_-]{43}$/ });
  receiver.secret = added.body.secret;
  const redirect = await http('POST', orch('/notifications/endpoints'), { url: `http://127.0.0.1:${redirectPort}/hook`, services: 'good', events: ['deployment.started'] });
  t.equal(redirect.status, 201);
  redirectEndpoint = redirect.body.endpoint.id;

  const listed = await http('GET', orch('/notifications/endpoints'));
  t.equal(listed.body.length, 2);
  t.match(listed.body[0] ?? {}, { id: String, url: String });
  t.notOk(JSON.stringify(listed.body).includes(receiver.secret), 'the listing holds no secret');
  t.notOk(listed.body.some((endpoint: object) => 'secret' in endpoint), 'nor a field for it');
  t.equal((await http('DELETE', orch('/notifications/endpoints/0123456789ab'))).status, 404);
  t.equal((await http('DELETE', orch('/notifications/endpoints/nope'))).status, 400);

  const journal = (await http('GET', orch('/journal?limit=20'))).body as { kind: string; message: string }[];
  const line = journal.find((entry) => entry.kind === 'notify.endpoint-added' && entry.message.includes('127.0.0.1'));
  t.ok(line, 'adding an endpoint is journaled');
  t.notOk(journal.some((entry) => entry.message.includes('path-secret')), 'by its origin: the path may be a secret');
});

t.test('a receiver that fails its first two deliveries gets every event once by id, signed', async (t) => {
  receiver.failNext = 2;
  await declare('good');
  const id = await deploy('good', good.reference);
  t.equal((await finished(id)).state, 'succeeded');
  const started = await received('deployment.started', about(id));
  const succeeded = await received('deployment.succeeded', about(id));
  t.match(started, { service: 'good', details: { deployment: id, release: 1, trigger: 'manual' }, text: /^good: deploying v1/ });
  t.match(succeeded, { service: 'good', timestamp: String, details: { deployment: id, release: 1, image: `${registry.host}/${repository}@${good.digest}` }, text: `good: v1 deployed: ${registry.host}/${repository}@${good.digest}` });
  t.equal(receiver.requests.filter((request) => request.status === 500).length, 2, 'the first two were refused');
  t.ok(receiver.requests.some((request) => request.status === 200 && Number(request.attempt) >= 2), 'and tried again');
  t.equal(receiver.badSignatures, 0, 'every delivery had a valid signature');
  t.equal(receiver.headerMismatches, 0, 'the event id and name headers match the body');

  const listed = await waitFor(async () => {
    const mine = (await deliveries()).filter((delivery) => delivery.endpoint !== redirectEndpoint && delivery.event.details.deployment === id);
    return mine.length === 2 && mine.every((delivery) => delivery.state === 'delivered') ? mine : undefined;
  }, 10_000, { what: 'both deliveries recorded delivered' });
  t.ok(listed.every((delivery) => delivery.statusCode === 200 && delivery.url === receiver.url), 'with the status code of the last attempt');
  t.ok(listed.some((delivery) => delivery.attempts >= 2), 'and how many attempts it took');
});

t.test('real deploys produce deployment.failed, .reverted, .superseded and unit.failed', async (t) => {
  await Promise.all([declare('crashy'), declare('sup')]);
  // A first deploy that crash-loops fails; one of a service that ran before is reverted.
  const [failing, reverting, superseded] = await Promise.all([deploy('crashy', crash.reference), deploy('good', crash.reference), deploy('sup', crash.reference)]);
  const replacing = await deploy('sup', good.reference);
  const outcomes = await Promise.all([finished(failing), finished(reverting), finished(superseded), finished(replacing)]);
  t.same(outcomes.map((outcome) => outcome.state), ['failed', 'reverted', 'superseded', 'succeeded']);

  const failed = await received('deployment.failed', about(failing));
  t.match(failed, { service: 'crashy', details: { reason: String }, text: /^crashy: deployment of v1 failed: / });
  t.match((await received('deployment.reverted', about(reverting))).text, /^good: deployment of v2 failed and is reverted: /);
  t.match((await received('deployment.superseded', about(superseded))).service, 'sup');
  await received('deployment.succeeded', about(replacing));
  const unit = await received('unit.failed', (event) => event.service === 'crashy');
  t.match(unit, { details: { unit: 'crashy-1.service', machine: 'm1', release: 1 }, text: /^crashy: unit crashy-1.service failed on m1/ });
  t.equal(
    [...receiver.events.values()].filter((event) => event.event === 'unit.failed' && event.service === 'crashy').length,
    1,
    'a unit crash-looping before it ever ran is one unit.failed, not one per restart',
  );
  t.equal(receiver.repeats, 0, 'nothing delivered twice');
  t.equal(receiver.badSignatures, 0);
});

t.test('killing the leading scheduler while deliveries are retried loses none and doubles none', async (t) => {
  const leaderIndex = await waitFor(async () => {
    const leads = await Promise.all(schedulers.map(async (scheduler) => (await http('GET', `${scheduler.url}/readyz`)).body.leader as boolean));
    return leads.filter(Boolean).length === 1 ? leads.indexOf(true) + 1 : undefined;
  }, 15_000, { what: 'one leader' }) - 1;
  const follower = schedulers[1 - leaderIndex]!;
  receiver.failAll = true;
  await declare('failover');
  const id = await deploy('failover', good.reference);
  await waitFor(async () => {
    const mine = (await deliveries('?state=pending')).filter((delivery) => delivery.event.details.deployment === id);
    return mine.some((delivery) => delivery.attempts >= 1);
  }, 30_000, { what: 'a delivery failed once and pending' });
  await schedulers[leaderIndex]!.stop('SIGKILL');
  await waitFor(async () => (await http('GET', `${follower.url}/readyz`)).body.leader === true, (TTL + 10) * 1000, { what: 'the follower leads' });
  t.equal((await finished(id)).state, 'succeeded');
  receiver.failAll = false;
  await received('deployment.started', about(id), GIVE_UP_SECONDS * 1000);
  await received('deployment.succeeded', about(id), GIVE_UP_SECONDS * 1000);
  const mine = await waitFor(async () => {
    const listed = (await deliveries()).filter((delivery) => delivery.event.details.deployment === id);
    return listed.length === 2 && listed.every((delivery) => delivery.state === 'delivered') ? listed : undefined;
  }, 10_000, { what: 'both recorded delivered by the new leader' });
  t.equal(mine.length, 2);
  t.equal(receiver.repeats, 0, 'no event acknowledged twice');
  t.equal(new Set(receiver.requests.filter((request) => request.status === 200).map((request) => request.id)).size, receiver.events.size);
  // Two schedulers again, for the tests after this one.
  schedulers[leaderIndex] = await serveRole('scheduler', await freePort(), schedulerFlags);
});

t.test('a redirect is not followed, and an endpoint that never takes a delivery is given up', async (t) => {
  const given = await waitFor(async () => {
    const listed = (await deliveries()).filter((delivery) => delivery.endpoint === redirectEndpoint);
    return listed.length > 0 && listed.every((delivery) => delivery.state === 'failed') ? listed : undefined;
  }, (GIVE_UP_SECONDS + 30) * 1000, { what: 'the redirected deliveries given up', intervalMs: 500 });
  t.ok(given.every((delivery) => delivery.event.event === 'deployment.started' && delivery.event.service === 'good'), 'only the events it asked for');
  t.match(given[0]!, { statusCode: 302, error: new RegExp(`^given up after \\d+ attempts: redirect 302 to 127\\.0\\.0\\.1:${elsewherePort} not followed$`) });
  t.ok(given[0]!.attempts >= 3, `${given[0]!.attempts} attempts`);
  t.equal(elsewhereHits, 0, 'the other host never got the signed body');
  t.match((await deliveries('?state=failed&limit=1')).length, 1, 'deliveries filter by state');
});

/** The CLI against the orchestrator: exit code, stdout and stderr. */
const platform = (...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> =>
  new Promise((resolve) => {
    execFile(process.execPath, [platformBin, ...args], { env: { ...process.env, PLATFORM_ORCHESTRATOR: orchestrator.url }, timeout: 60_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr });
    });
  });

t.test('platform notify add, list, deliveries and remove', async (t) => {
  const bad = await platform('notify', 'add', 'http://127.0.0.1:9/x', '--events', 'deployment.failed,deploy.exploded');
  t.not(bad.code, 0);
  t.match(bad.stderr, /unknown event deploy\.exploded; events are deployment\.started, /);
  const added = await platform('notify', 'add', 'http://127.0.0.1:9/cli', '--services', 'cli-*', '--events', 'deployment.failed,unit.failed');
  t.equal(added.code, 0, added.stderr);
  t.match(added.stdout, /^whsec_[A-Za-z0-9_-]{43}\n$/, 'the secret alone on stdout');
  const id = /endpoint ([0-9a-f]{12}) added/.exec(added.stderr)?.[1] ?? '';
  t.ok(id, added.stderr);
  const listed = await platform('notify', 'list');
  t.match(listed.stdout, new RegExp(`${id}\\s+http://127\\.0\\.0\\.1:9/cli\\s+cli-\\*\\s+deployment\\.failed,unit\\.failed`));
  t.notOk(listed.stdout.includes(added.stdout.trim()), 'no secret in the listing');
  const shown = await platform('notify', 'deliveries', '--state', 'delivered', '--limit', '3');
  t.equal(shown.code, 0, shown.stderr);
  t.match(shown.stdout, /CREATED\s+EVENT\s+SERVICE\s+ENDPOINT\s+STATE/);
  t.match(shown.stdout, /delivered/);
  t.equal((await platform('notify', 'remove', id)).code, 0);
  const again = await platform('notify', 'remove', id);
  t.not(again.code, 0);
  t.match(again.stderr, /404: notification endpoint [0-9a-f]{12} does not exist/);
});

t.test('a machine whose agent dies is told as machine.lost, naming the services it ran', async (t) => {
  await agent.stop('SIGKILL');
  const lost = await received('machine.lost', (event) => event.details.machine === 'm1', (TTL + 30) * 1000);
  t.match(lost, { service: null, text: /^machine m1 lost; it ran units of / });
  t.ok((lost.details.services as string[]).includes('good'), `services: ${String(lost.details.services)}`);
  t.equal([...receiver.events.values()].filter((event) => event.event === 'machine.lost').length, 1, 'once, though two schedulers saw it');
  await waitFor(async () => (await deliveries('?limit=10')).some((delivery) => delivery.event.event === 'machine.lost' && delivery.state === 'delivered'), 10_000, { what: 'machine.lost listed delivered' });
});
