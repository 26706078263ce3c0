import t, { type Test } from 'tap';
import { Agent, request, type Dispatcher } from 'undici';
import { startEtcd } from '../harness/etcd.js';
import { freePort } from '../harness/free-port.js';
import { http, serveRole } from '../harness/platform.js';
import { startGateway } from '../harness/gateway-cluster.js';
import { jsonBodyOf, openRaw, statusOf, type Closed } from '../harness/raw-connection.js';
import { waitFor } from '../harness/wait.js';

// Clients that never finish a request, on real roles on a real etcd (issue 14, item 5): a request
// head sent one byte a second, a body that never ends, connections over the caps, and the event
// streams that must outlive all of it. Every role runs with short timeouts (--headers-timeout 3
// --body-timeout 4) so the test takes seconds; one agent runs with the defaults, to see the
// default headers timeout (10 s) is in force.

const HEADERS_S = 3;
const BODY_S = 4;
/** Node checks the timeouts every 750 ms at these settings; allow for it and a loaded machine. */
const SLACK_MS = 2_000;

const etcd = await startEtcd();
const flags = ['--etcd', etcd.url, '--announce-ttl', '3'];
const short = ['--headers-timeout', String(HEADERS_S), '--body-timeout', String(BODY_S)];
// No Docker engine: the agent serves its API all the same.
const noDocker = { DOCKER_HOST: 'unix:///nonexistent/docker.sock' };
// One after another: seven processes starting at once on two busy cores can miss etcd's deadlines.
const directory = await serveRole('directory', await freePort(), [...flags, ...short]);
const scheduler = await serveRole('scheduler', await freePort(), [...flags, ...short]);
const orchestrator = await serveRole('orchestrator', await freePort(), [...flags, ...short]);
const agent = await serveRole('agent', await freePort(), [...flags, ...short, '--machine-id', 'slow-clients'], noDocker);
// The Node data plane's limits; HAProxy's differences (its own timeouts, no whole-body timeout)
// are listed in docs/gateway.md. Both planes answer the connection caps alike (the last test).
const caps = ['--max-connections', '8', '--max-connections-per-address', '5'];
const gateway = await serveRole('gateway', await freePort(), [...flags, ...short, ...caps, '--data-plane', 'node']);
const web = await serveRole('web', await freePort(), [...flags, ...short]);
const defaultAgent = await serveRole('agent', await freePort(), [...flags, '--machine-id', 'slow-clients-defaults'], noDocker);
const roles = { directory, scheduler, orchestrator, agent, gateway, web };
t.teardown(async () => {
  await Promise.all([...Object.values(roles), defaultAgent].map((role) => role.stop()));
  await etcd.stop();
});

const portOf = (url: string) => Number(new URL(url).port);

// Started now, checked last: the default timeout takes 10 s to show.
const defaultHead = openRaw(portOf(defaultAgent.url));
defaultHead.socket.write('GET /units HTTP/1.1\r\nHost: 127.0.0.1\r\n');

t.test('50 clients sending a head one byte a second do not stop the API answering others; each is answered 408 and closed at the headers timeout', async (t) => {
  const head = `GET /services HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ${'s'.repeat(40)}\r\n\r\n`;
  const slow = Array.from({ length: 50 }, () => openRaw(portOf(roles.orchestrator.url)));
  await Promise.all(slow.map((connection) => connection.opened));
  for (const connection of slow) connection.drip(head, 1000);

  // Meanwhile other clients are answered at once, on new connections and on kept-alive ones.
  const latencies: number[] = [];
  const statuses: number[] = [];
  const until = Date.now() + (HEADERS_S * 1000 + 500);
  while (Date.now() < until) {
    const started = Date.now();
    const reply = await request(`${roles.orchestrator.url}/services`, { headersTimeout: 5_000, bodyTimeout: 5_000, reset: statuses.length % 2 === 0 });
    await reply.body.dump();
    statuses.push(reply.statusCode);
    latencies.push(Date.now() - started);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  t.ok(statuses.length >= 20, `${statuses.length} requests answered meanwhile`);
  t.ok(statuses.every((status) => status === 200), `every other client got 200: ${[...new Set(statuses)].join(', ')}`);
  t.ok(Math.max(...latencies) < 1_000, `the slowest answer took ${Math.max(...latencies)} ms`);

  const closes: Closed[] = await Promise.all(slow.map((connection) => connection.closed));
  for (const [i, closed] of closes.entries()) {
    t.equal(statusOf(closed.received), 408, `slow client ${i} was answered 408`);
    t.match(jsonBodyOf(closed.received)?.message, `the request head did not arrive within ${HEADERS_S} s`);
    t.ok(closed.afterMs >= HEADERS_S * 1000 - 100 && closed.afterMs <= HEADERS_S * 1000 + SLACK_MS, `slow client ${i} closed after ${closed.afterMs} ms`);
  }
  t.ok(closes.every((closed) => closed.received.length < 400), 'no slow client got anything but the 408');
  t.equal((await http('GET', `${roles.orchestrator.url}/healthz`)).status, 200);
});

/** A POST each role reads the body of (the gateway: a host it routes nowhere). */
const bodyTargets: Record<keyof typeof roles, { path: string; host?: string }> = {
  directory: { path: '/services' },
  scheduler: { path: '/hooks/deploy' },
  orchestrator: { path: '/services' },
  agent: { path: '/units' },
  gateway: { path: '/', host: 'nothing.platform.local' },
  web: { path: '/services' },
};

t.test('a request whose body never finishes is closed at the body timeout on every role', async (t) => {
  const outcomes = await Promise.all(
    Object.entries(bodyTargets).map(async ([role, target]) => {
      const connection = openRaw(portOf(roles[role as keyof typeof roles].url));
      await connection.opened;
      connection.socket.write(
        `POST ${target.path} HTTP/1.1\r\nHost: ${target.host ?? '127.0.0.1'}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{"name": "never-ends", "containerImage": `,
      );
      return { role, closed: await connection.closed };
    }),
  );
  for (const { role, closed } of outcomes) {
    t.ok(closed.afterMs >= BODY_S * 1000 - 100 && closed.afterMs <= BODY_S * 1000 + SLACK_MS, `${role}: closed after ${closed.afterMs} ms`);
    if (role === 'gateway') {
      // The gateway answers an unrouted host at once, and still closes the connection the body holds.
      t.equal(statusOf(closed.received), 404, `${role} answered: ${closed.received.split('\r\n')[0]}`);
      continue;
    }
    t.equal(statusOf(closed.received), 408, `${role} answered: ${closed.received.split('\r\n')[0]}`);
    t.match(jsonBodyOf(closed.received)?.message, `the request did not arrive whole within ${BODY_S} s`, role);
  }
  const services = await http('GET', `${roles.directory.url}/services`);
  t.notOk((services.body as { name: string }[]).some((service) => service.name === 'never-ends'), 'nothing was declared');
});

/** Reads an event stream into a string until aborted. */
/** Loopback clients of their own addresses, 127.0.0.<n>: callers the per-caller stream caps tell apart. */
const clientsFrom = new Map<number, Agent>();
const clientFrom = (n: number): Agent => clientsFrom.get(n) ?? clientsFrom.set(n, new Agent({ localAddress: `127.0.0.${n}`, connections: 200 })).get(n)!;
t.teardown(() => Promise.all([...clientsFrom.values()].map((client) => client.close())));

interface ReadStream {
  text: () => string;
  status: Promise<number>;
  headers: () => Record<string, string | string[] | undefined>;
  /** Whether the server ended the body. */
  ended: () => boolean;
  close: () => void;
}

function readStream(url: string, dispatcher?: Dispatcher): ReadStream {
  const controller = new AbortController();
  let text = '';
  let headers: Record<string, string | string[] | undefined> = {};
  let ended = false;
  const status = request(url, { signal: controller.signal, headersTimeout: 10_000, bodyTimeout: 0, ...(dispatcher ? { dispatcher } : {}) }).then((reply) => {
    headers = reply.headers;
    reply.body.setEncoding('utf8');
    reply.body.on('data', (chunk: string) => {
      text += chunk;
    });
    reply.body.on('end', () => {
      ended = true;
    });
    reply.body.on('error', () => undefined);
    return reply.statusCode;
  });
  status.catch(() => undefined);
  return { text: () => text, status, headers: () => headers, ended: () => ended, close: () => controller.abort() };
}

t.test('event streams, direct and through the web role, outlive the headers and body timeouts', async (t) => {
  const direct = readStream(`${roles.orchestrator.url}/events`);
  const proxied = readStream(`${roles.web.url}/events`);
  t.equal(await direct.status, 200);
  t.equal(await proxied.status, 200);
  await new Promise((resolve) => setTimeout(resolve, (BODY_S + 2) * 1000));
  const declared = await http('POST', `${roles.directory.url}/services`, { name: 'outlives-timeouts', containerImage: 'registry.example/outlives:1' });
  t.equal(declared.status, 201);
  const seen = async (stream: ReturnType<typeof readStream>) => {
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline && !stream.text().includes('outlives-timeouts')) await new Promise((resolve) => setTimeout(resolve, 100));
    return stream.text().includes('outlives-timeouts');
  };
  t.ok(await seen(direct), 'the orchestrator stream carried a change made after the timeouts');
  t.ok(await seen(proxied), 'the stream through the web role did too');
  direct.close();
  proxied.close();
  await http('DELETE', `${roles.directory.url}/services/outlives-timeouts`);
});

t.test('one caller holds at most 20 event streams: its next is answered 429 naming the cap, and another caller still gets one', async (t) => {
  const streams = Array.from({ length: 20 }, () => readStream(`${roles.orchestrator.url}/events`, clientFrom(20)));
  t.same(new Set(await Promise.all(streams.map((stream) => stream.status))), new Set([200]));
  const refused = readStream(`${roles.orchestrator.url}/events`, clientFrom(20));
  t.equal(await refused.status, 429);
  await waitFor(() => refused.ended(), 10_000, { what: 'the refusal’s body' });
  refused.close();
  const body = JSON.parse(refused.text()) as { message: string };
  t.equal(refused.headers()['retry-after'], '5');
  t.equal(body.message, 'too many event streams from 127.0.0.20: one caller holds at most 20 at once (of 100 served); close one first');
  const other = readStream(`${roles.orchestrator.url}/events`, clientFrom(21));
  t.equal(await other.status, 200, 'another caller is not held to the first one’s share');
  for (const stream of [...streams, other]) stream.close();
  const metrics = async () => (await request(`${roles.orchestrator.url}/metrics`)).body.text();
  await waitFor(async () => /^platform_events_clients 0$/m.test(await metrics()), 10_000, { what: 'the streams to be closed' });
});

t.test('at most 100 event streams at once: the next is answered 503 with Retry-After naming the cap', async (t) => {
  // Five callers holding their whole share each.
  const streams = Array.from({ length: 100 }, (_, i) => readStream(`${roles.orchestrator.url}/events`, clientFrom(30 + (i % 5))));
  t.same(new Set(await Promise.all(streams.map((stream) => stream.status))), new Set([200]));
  const refused = await request(`${roles.orchestrator.url}/events`, { headersTimeout: 10_000 });
  const body = (await refused.body.json()) as { message: string };
  t.equal(refused.statusCode, 503);
  t.equal(refused.headers['retry-after'], '5');
  t.match(body.message, 'too many event streams: at most 100 are served at once');
  const viaWeb = await request(`${roles.web.url}/events`, { headersTimeout: 10_000 });
  await viaWeb.body.dump();
  t.equal(viaWeb.statusCode, 503, 'the web role passes the refusal on');
  t.equal(viaWeb.headers['retry-after'], '5');
  streams[0]!.close();
  let replacement = readStream(`${roles.orchestrator.url}/events`);
  for (let attempt = 0; attempt < 20 && (await replacement.status) !== 200; attempt++) {
    replacement.close();
    await new Promise((resolve) => setTimeout(resolve, 100));
    replacement = readStream(`${roles.orchestrator.url}/events`);
  }
  t.equal(await replacement.status, 200, 'a stream that ended makes room');
  replacement.close();
  for (const stream of streams) stream.close();
});

async function capsAnswered(t: Test, gatewayUrl: string): Promise<void> {
  const port = portOf(gatewayUrl);
  const held = Array.from({ length: 5 }, () => openRaw(port, '127.0.0.1'));
  await Promise.all(held.map((connection) => connection.opened));
  // The caps count connections as the server sees them: let it register all five.
  await new Promise((resolve) => setTimeout(resolve, 200));

  const sixth = openRaw(port, '127.0.0.1');
  sixth.socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
  const perAddress = await sixth.closed;
  t.equal(statusOf(perAddress.received), 503);
  t.match(perAddress.received, /\r\nretry-after: 5\r\n/i);
  t.match(jsonBodyOf(perAddress.received)?.message, 'too many connections from 127.0.0.1: the gateway accepts at most 5 at once from one address');

  const fromOthers = ['127.0.0.2', '127.0.0.3', '127.0.0.4'].map((address) => openRaw(port, address));
  await Promise.all(fromOthers.map((connection) => connection.opened));
  await new Promise((resolve) => setTimeout(resolve, 200));
  const ninth = openRaw(port, '127.0.0.5');
  ninth.socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
  const total = await ninth.closed;
  t.equal(statusOf(total.received), 503);
  t.match(jsonBodyOf(total.received)?.message, 'too many connections: the gateway accepts at most 8 at once');

  for (const connection of [...held, ...fromOthers]) connection.socket.destroy();
  await Promise.all([...held, ...fromOthers].map((connection) => connection.closed));
  await new Promise((resolve) => setTimeout(resolve, 200));
  t.equal((await http('GET', `${gatewayUrl}/healthz`)).status, 200, 'closed connections make room');
}

t.test('connections over the per-address or the total cap are answered 503 with Retry-After naming the cap, and never reach the role', (t) => capsAnswered(t, roles.gateway.url));

t.test('the HAProxy data plane answers the connection caps as the Node plane does', async (t) => {
  const haproxy = await startGateway('haproxy', [...flags, ...caps]);
  t.teardown(() => haproxy.stop());
  await capsAnswered(t, haproxy.url);

  // Requests HAProxy passes to the gateway's own server all come from 127.0.0.1: six clients (each
  // under its cap) holding such a request open must not be refused as one address over its cap.
  const port = portOf(haproxy.url);
  const clients = ['127.0.0.2', '127.0.0.3', '127.0.0.4', '127.0.0.5', '127.0.0.6', '127.0.0.7'].map((address) => openRaw(port, address));
  await Promise.all(clients.map((client) => client.opened));
  for (const client of clients) client.socket.write('POST /nothing HTTP/1.1\r\nHost: nobody.example.test\r\nContent-Length: 10\r\n\r\n');
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  for (const client of clients) client.socket.end('0123456789');
  const answers = await Promise.all(clients.map((client) => client.closed));
  t.same(answers.map((answer) => statusOf(answer.received)), [404, 404, 404, 404, 404, 404], 'each unknown host is answered 404');
});

t.test('with the defaults, a head that never finishes is answered 408 at 10 s', async (t) => {
  const closed = await defaultHead.closed;
  t.equal(statusOf(closed.received), 408);
  t.match(jsonBodyOf(closed.received)?.message, 'the request head did not arrive within 10 s');
  t.ok(closed.afterMs >= 9_900 && closed.afterMs <= 10_000 + SLACK_MS, `closed after ${closed.afterMs} ms`);
});
