import t, { type Test } from 'tap';
import { createServer, request as httpRequest, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import { EventEmitter, once } from 'node:events';
import { createHash, randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { availableParallelism } from 'node:os';
import { Readable } from 'node:stream';
import { Client, request } from 'undici';
import { WebSocket, WebSocketServer } from 'ws';
import { freePort } from '../harness/free-port.js';
import { http } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';
import { startGateway, startGatewayCluster, type Gateway } from '../harness/gateway-cluster.js';
import { buildTestImage } from '../harness/test-image.js';
import { openStore } from '../../src/store/open-store.js';
import { unitStatusKey } from '../../src/store/keys.js';
import { slotOf } from '../../src/units.js';
import type { UnitStatus } from '../../src/schemas/cluster.js';

// The gateway on real parts: etcd, the directory, the scheduler, an agent running units of the
// test image on a real dockerd, and one gateway per data plane (HAProxy, Node), each its own
// `platform serve` process. Every test runs against each data plane in turn, on the same units.

const cluster = await startGatewayCluster();
const { flags, declare, routable } = cluster;
const store = await openStore({ etcd: [cluster.etcd.url], dataDir: '' });
t.teardown(async () => {
  await store.close();
  await cluster.stop();
});

const name = (prefix: string) => `${prefix}-${randomBytes(2).toString('hex')}`;

/** A request through the gateway with the given Host header. */
async function viaGatewayAt(gatewayPort: number, host: string, path = '/', options: { method?: string; headers?: Record<string, string>; body?: string | Readable; port?: number } = {}) {
  const response = await request(`http://127.0.0.1:${options.port ?? gatewayPort}${path}`, {
    method: (options.method ?? 'GET') as 'GET',
    headers: { host, ...options.headers },
    ...(options.body === undefined ? {} : { body: options.body }),
    headersTimeout: 30_000,
  });
  const text = await response.body.text();
  return { status: response.statusCode, headers: response.headers, text };
}

/** A request with Node's client on a connection of its own (no pooling), through the gateway. */

function nodeGetAt(address: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: IncomingHttpHeaders; text: string }> {
  const colon = address.lastIndexOf(':');
  return new Promise((resolve, reject) => {
    const outgoing = httpRequest({ host: address.slice(0, colon), port: Number(address.slice(colon + 1)), path, headers, agent: false }, (response) => {
      let text = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (text += chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers, text }));
    });
    outgoing.on('error', reject);
    outgoing.end();
  });
}

const internal = (service: string) => `${service}.platform.internal`;
const publicHost = (service: string) => `${service}.platform.local`;

const web = name('web');
const front = name('front');
await Promise.all([
  declare(web, { numInstances: 3, publicFacing: false, env: { GREETING: 'hello' } }),
  declare(front, { numInstances: 1, publicFacing: true, env: { GREETING: 'front' } }),
]);
await Promise.all([cluster.deploy(web), cluster.deploy(front)]);

for (const gateway of cluster.gateways) t.test(`the ${gateway.plane} data plane`, async (t) => planeTests(t, gateway));

async function planeTests(t: Test, gateway: Gateway): Promise<void> {
  const gatewayPort = gateway.port;
  const viaGateway = (host: string, path = '/', options: Parameters<typeof viaGatewayAt>[3] = {}) => viaGatewayAt(gatewayPort, host, path, options);
  /** A request with Node's client on a connection of its own (no pooling), through the gateway. */
  const nodeGet = (host: string, path: string, headers: Record<string, string>) => nodeGetAt(`127.0.0.1:${gatewayPort}`, path, { host, ...headers });

  t.test('requests for <service>.<internal domain> on one connection reach every unit in turn; on new connections every unit answers', async (t) => {
    const units = await routable(web, 3);
    t.same(units.map((u) => u.unit), [1, 2, 3].map((i) => `${web}-${i}.service`));
    // One keep-alive connection: HAProxy serves a connection on one of its threads, whose own copy of
    // the backend (haproxy-config.ts threadBackendName) takes idle units in turn, as the Node plane does.
    const connection = new Client(`http://127.0.0.1:${gatewayPort}`);
    const answers: string[] = [];
    for (let i = 0; i < 6; i++) {
      const reply = await connection.request({ path: '/', method: 'GET', headers: { host: internal(web) } });
      t.equal(reply.statusCode, 200);
      answers.push((await reply.body.text()).trim());
    }
    await connection.close();
    const answering = answers.map((answer) => answer.split(' ')[0]);
    t.same(new Set(answering.slice(0, 3)).size, 3, `three units answered the first three requests: ${answering.join(', ')}`);
    t.same(answering.slice(3), answering.slice(0, 3), 'and again in the same order');
    for (const answer of answers) t.match(answer, new RegExp(`^${web}-[123]\\.service hello v1 one$`));
    // New connections are spread over HAProxy's threads, each taking the units in turn on its own (so
    // two threads may each send one to the same unit): in units x threads requests one thread has
    // taken at least one turn, so every unit answers.
    const fresh = await Promise.all(Array.from({ length: 3 * availableParallelism() }, () => nodeGet(internal(web), '/', {})));
    t.same(new Set(fresh.map((reply) => reply.text.split(' ')[0])).size, 3, 'every unit answered one of the requests on new connections');
    const mixedCase = await viaGateway(`${web.toUpperCase()}.Platform.Internal:${gatewayPort}`);
    t.equal(mixedCase.status, 200, 'the Host header is matched case-insensitively, with its port ignored');
  });

  t.test('connections to units that keep them alive are pooled and reused', async (t) => {
    // The keep-alive variant of the test image: the same page from Node's http server, which keeps
    // connections open and counts those it accepted (GET /connections).
    const repository = `gw/keep-alive-${randomBytes(2).toString('hex')}`;
    const image = await buildTestImage(cluster.engine.docker, cluster.registry.host, repository, 'v1', { variant: 'keep-alive', label: 'pooled' });
    const service = name('pooled');
    await declare(service, { containerImage: `${cluster.registry.host}/${repository}`, numInstances: 3 });
    const deploy = await http('POST', `${cluster.scheduler.url}/hooks/deploy`, { serviceName: service, containerRepository: image.reference, pushedAt: 0 });
    t.equal(deploy.status, 200);
    const units = await routable(service, 3, 90_000);
    /** Connections a unit has accepted, asked on a connection of its own (counted too). */
    const accepted = async (address: string) => Number((await nodeGetAt(address, '/connections')).text);
    const before = await Promise.all(units.map((unit) => accepted(unit.address)));
    const answering = new Set<string>();
    const statuses: number[] = [];
    for (let i = 0; i < 60; i++) {
      const reply = await viaGateway(internal(service));
      statuses.push(reply.status);
      answering.add(reply.text.split(' ')[0]!);
    }
    t.same(statuses, new Array<number>(60).fill(200), '60 requests answered 200');
    t.equal(answering.size, 3, 'all three units answered');
    const after = await Promise.all(units.map((unit) => accepted(unit.address)));
    // 60 requests one after another, 20 per unit: one pooled connection per unit carries them (the
    // count also includes this test's own question); without reuse it would grow by 20.
    const opened = after.map((count, i) => count - before[i]! - 1);
    t.ok(opened.every((count) => count <= 2), `connections the gateway opened per unit for 20 requests each: ${opened.join(', ')}`);
    await http('DELETE', `${cluster.directory.url}/services/${service}`);
  });

  t.test('a service that is not public-facing is not reachable on the public domain; a public-facing one is on both', async (t) => {
    await routable(web, 3);
    const hidden = await viaGateway(publicHost(web));
    t.equal(hidden.status, 404);
    t.match(JSON.parse(hidden.text), { statusCode: 404, message: `no service is reachable at ${publicHost(web)}` });
    await routable(front, 1);
    t.match((await viaGateway(publicHost(front))).text, new RegExp(`^${front}-1\\.service front v1`));
    t.match((await viaGateway(internal(front))).text, new RegExp(`^${front}-1\\.service front v1`));
  });

  t.test('an unknown host is answered 404 naming the host, as JSON or as a page', async (t) => {
    const json = await viaGateway('nope.platform.local');
    t.equal(json.status, 404);
    t.same(JSON.parse(json.text), { statusCode: 404, error: 'Not Found', message: 'no service is reachable at nope.platform.local' });
    const page = await viaGateway('<b>x</b>.example.com', '/', { headers: { accept: 'text/html' } });
    t.equal(page.status, 404);
    t.match(page.headers['content-type'], /text\/html/);
    t.match(page.text, /no service is reachable at &lt;b&gt;x&lt;\/b&gt;\.example\.com/, 'the host is named, escaped');
  });

  t.test('a service with no healthy unit is answered 503 naming it, with Retry-After', async (t) => {
    const idle = name('idle');
    await declare(idle, { numInstances: 1 });
    await routable(idle, 0);
    const reply = await viaGateway(internal(idle));
    t.equal(reply.status, 503);
    t.equal(reply.headers['retry-after'], '2');
    t.match(JSON.parse(reply.text), { statusCode: 503, message: `service ${idle} has no healthy unit` });
  });

  t.test('the gateway answers /healthz, /readyz and /metrics on its own address', async (t) => {
    t.match(await http('GET', `${gateway.url}/healthz`), { status: 200, body: { status: 'ok', role: 'gateway' } });
    t.match(await http('GET', `${gateway.url}/readyz`), { status: 200, body: { status: 'ready', role: 'gateway', dataPlane: gateway.plane } });
    // One request of the service's own, so its counter is there to read.
    t.equal((await viaGateway(internal(web))).status, 200);
    const metrics = (await http('GET', `${gateway.url}/metrics`)).body as string;
    if (gateway.plane === 'node') t.match(metrics, new RegExp(`platform_gateway_requests_total\\{service="${web}",status="200"\\} \\d+`));
    else t.match(metrics, new RegExp(`platform_gateway_haproxy_responses_total\\{service="${web}",code="2xx"\\} [1-9]`), "HAProxy's counters");
    t.match(metrics, /platform_gateway_requests_total\{service="",status="404"\} \d+/);
    t.match(metrics, new RegExp(`platform_gateway_routable_units\\{service="${web}"\\} 3`));
    t.equal((await viaGateway(`127.0.0.1:${gatewayPort}`, '/')).status, 404, 'other paths on its own address are unknown hosts');
  });

  t.test('with --expose-components the announced components are reachable by name', async (t) => {
    const port = await freePort();
    const exposing = await startGateway(gateway.plane, [...flags, '--expose-components'], port);
    t.teardown(() => exposing.stop());
    const health = await waitFor(async () => {
      const reply = await viaGateway('service-directory.platform.internal', '/healthz', { port });
      return reply.status === 200 ? JSON.parse(reply.text) : undefined;
    }, 10_000);
    t.same(health, { status: 'ok', role: 'directory' });
    t.match(JSON.parse((await viaGateway('scheduler.platform.internal', '/healthz', { port })).text), { role: 'scheduler' });
    const described = await viaGateway('service-directory.platform.internal', '/documentation/json', { port });
    t.equal(described.status, 200, `a component answers the name it is routed under beyond /healthz (its Host rule): ${described.text.slice(0, 200)}`);
    t.equal((await viaGateway('scheduler.platform.local', '/healthz', { port })).status, 404, 'the scheduler is internal only');
    t.equal((await viaGateway('service-directory.platform.internal', '/healthz')).status, 404, 'components are not exposed by default');
  });

  // The busybox test image has no WebSocket server and cannot show the headers it received, so
  // these tests use a Node server on 127.0.0.1 as the unit: its UnitStatus record is written into
  // the store directly, as an agent would write it. Everything else in this file uses real units.
  t.test('through a local upstream', async (t) => {
    const local = await startLocalUpstream();
    const service = name('local');
    await declare(service, { numInstances: 1 });
    const status = (port: number, active: UnitStatus['active'] = 'active', instance = 1): UnitStatus => ({
      unit: `${service}-${instance}.service`,
      service,
      instance,
      machine: 'local-upstream',
      release: 1,
      spec: 'local',
      image: 'none',
      active,
      sub: 'running',
      address: `127.0.0.1:${port}`,
      restarts: 0,
      updatedAt: new Date().toISOString(),
    });
    const keyOf = (unit: UnitStatus) => unitStatusKey(unit.machine, slotOf(unit));
    const put = (unit: UnitStatus) => store.put(keyOf(unit), JSON.stringify(unit));
    await put(status(local.port));
    t.teardown(async () => {
      await store.delete(keyOf(status(local.port)));
      await local.close();
    });
    await routable(service, 1);

    t.test('a WebSocket is tunnelled both ways', async (t) => {
      const socket = new WebSocket(`ws://127.0.0.1:${gatewayPort}/echo`, { headers: { host: internal(service) } });
      await new Promise((resolve, reject) => {
        socket.once('open', resolve);
        socket.once('error', reject);
      });
      const echoed = new Promise<string>((resolve) => socket.once('message', (data) => resolve(String(data))));
      socket.send('hello through the gateway');
      t.equal(await echoed, 'echo: hello through the gateway');
      socket.close();
      t.match(local.upgrades[0], { 'x-forwarded-for': '127.0.0.1', 'x-forwarded-host': internal(service), upgrade: 'websocket' });
    });

    t.test('hop-by-hop headers stay on their hop and X-Forwarded-* reach the unit', async (t) => {
      // Node's own client sends a Connection header naming another header (undici's refuses to).
      const reply = await nodeGet(internal(service), '/headers', {
        connection: 'keep-alive, x-drop',
        'x-drop': '1',
        'proxy-authorization': 'Basic x',
        te: 'trailers',
        'x-forwarded-for': '10.9.8.7',
        'x-keep': 'yes',
      });
      t.equal(reply.status, 200);
      const seen = JSON.parse(reply.text) as IncomingHttpHeaders;
      t.equal(seen['x-keep'], 'yes');
      t.equal(seen['x-drop'], undefined);
      t.equal(seen['proxy-authorization'], undefined);
      t.equal(seen.te, undefined);
      t.equal(seen['x-forwarded-for'], '10.9.8.7, 127.0.0.1');
      t.equal(seen['x-forwarded-proto'], 'http');
      t.equal(seen['x-forwarded-host'], internal(service));
      t.equal(seen.host, internal(service));
      t.equal(reply.headers['x-internal'], undefined, 'a response header its Connection header names is dropped');
      t.equal(reply.headers['x-visible'], 'yes');
    });

    t.test('bodies stream both ways', async (t) => {
      const chunks = Array.from({ length: 64 }, () => randomBytes(64 * 1024));
      const expected = createHash('sha256');
      for (const chunk of chunks) expected.update(chunk);
      const upload = await viaGateway(internal(service), '/count', { method: 'POST', body: Readable.from(chunks) });
      t.same(JSON.parse(upload.text), { bytes: 64 * 64 * 1024, sha256: expected.digest('hex') }, 'a 4 MiB chunked upload arrives whole');

      const response = await request(`http://127.0.0.1:${gatewayPort}/stream`, { headers: { host: internal(service) } });
      const reader = response.body[Symbol.asyncIterator]();
      const first = await reader.next();
      t.equal(String(first.value), 'first\n', 'the first chunk arrives while the unit still holds the rest');
      local.release();
      let rest = '';
      for (let next = await reader.next(); !next.done; next = await reader.next()) rest += String(next.value);
      t.equal(rest, 'second\n');
    });

    t.test('a request head above the size cap is refused with 431', async (t) => {
      const reply = await viaGateway(internal(service), '/headers', { headers: { 'x-big': 'x'.repeat(20_000) } }).catch((error: Error) => ({ status: 0, text: error.message }));
      t.equal(reply.status, 431);
    });

    t.test('a unit that refuses connections costs no idempotent request: it is retried on another', async (t) => {
      const deadPort = await freePort();
      const dead = status(deadPort, 'active', 2);
      await put(dead);
      await routable(service, 2);
      const statuses: number[] = [];
      for (let i = 0; i < 6; i++) statuses.push((await viaGateway(internal(service), '/headers')).status);
      t.same(statuses, [200, 200, 200, 200, 200, 200]);
      const metrics = (await http('GET', `${gateway.url}/metrics`)).body as string;
      t.match(metrics, new RegExp(`platform_gateway_${gateway.plane === 'node' ? '' : 'haproxy_'}retries_total\\{service="${service}"\\} [1-9]`));
      await store.delete(keyOf(dead));
      await routable(service, 1);
    });

    t.test('a unit that cannot be reached (its retry included) is answered 502 naming it, as JSON', async (t) => {
      // On HAProxy the failed connection is HAProxy's own 503 until the generated config rewrites it.
      const lonely = name('unreachable');
      await declare(lonely, { numInstances: 1 });
      const dead: UnitStatus = { ...status(await freePort()), unit: `${lonely}-1.service`, service: lonely };
      await put(dead);
      t.teardown(() => store.delete(keyOf(dead)));
      await routable(lonely, 1);
      const reply = await viaGateway(internal(lonely), '/headers');
      t.equal(reply.status, 502, reply.text);
      t.match(reply.headers['content-type'], /^application\/json/);
      t.match(JSON.parse(reply.text), { statusCode: 502, error: 'Bad Gateway', message: new RegExp(`^${lonely}-1\\.service of ${lonely} could not be reached`) });
      t.notOk(reply.headers['x-platform-unreachable'], 'the marker of the rewritten 503 does not reach the client');
      const unitOwn503 = await viaGateway(internal(service), '/status?code=503');
      t.equal(unitOwn503.status, 503, "a unit's own 503 is passed on as it is");
      t.equal(unitOwn503.text, 'own answer');
    });

    t.test('a draining unit gets no new request while its in-flight request finishes', async (t) => {
      const slow = viaGateway(internal(service), '/slow?ms=3000');
      await waitFor(() => local.inFlight > 0, 5_000, { what: 'the slow request to reach the unit' });
      await put(status(local.port, 'deactivating'));
      await routable(service, 0);
      const during = await viaGateway(internal(service), '/headers');
      t.equal(during.status, 503, 'new requests are not sent to it');
      const finished = await slow;
      t.equal(finished.status, 200, 'the request in flight finishes');
      t.equal(finished.text, 'slow done');
      await put(status(local.port));
      await routable(service, 1);
    });

    t.test('a unit holding its requests is avoided: it gets at most one per HAProxy thread, the other unit the rest', async (t) => {
      const held: ServerResponse[] = [];
      const arrivals = new EventEmitter();
      const holding = createServer((_request, response) => {
        held.push(response);
        arrivals.emit('held');
      });
      await new Promise<void>((resolve) => holding.listen(0, '127.0.0.1', resolve));
      const holder = status((holding.address() as AddressInfo).port, 'active', 2);
      t.teardown(async () => {
        for (const response of held) response.end();
        await store.delete(keyOf(holder));
        await routable(service, 1);
        holding.closeAllConnections();
        holding.close();
      });
      await put(holder);
      await routable(service, 2);
      // One request at a time, each on a new connection, each waited for until it is answered or held.
      const replies: Promise<{ status: number }>[] = [];
      for (let i = 0; i < 12; i++) {
        const reply = nodeGet(internal(service), '/headers', {});
        replies.push(reply);
        await Promise.race([reply, once(arrivals, 'held')]);
      }
      // Least outstanding requests: counted across the gateway on the Node plane (one held), per
      // thread on HAProxy (haproxy-config.ts threadBackendName), where a thread that has not yet
      // sent the unit a request sees it idle once.
      t.ok(held.length >= 1 && held.length <= availableParallelism(), `the holding unit got ${held.length} of 12 requests (at most one per thread: ${availableParallelism()})`);
      for (const response of held) response.end('held');
      t.same((await Promise.all(replies)).map((reply) => reply.status), new Array<number>(12).fill(200), 'every request was answered, the held ones once released');
    });

    t.test('a unit slower than --request-timeout is answered 504', async (t) => {
      const port = await freePort();
      const strict = await startGateway(gateway.plane, [...flags, '--request-timeout', '1'], port);
      t.teardown(() => strict.stop());
      await waitFor(async () => (await viaGateway(internal(service), '/headers', { port })).status === 200, 10_000);
      const reply = await viaGateway(internal(service), '/slow?ms=3000', { port });
      t.equal(reply.status, 504);
      t.match(JSON.parse(reply.text), { message: `${service}-1.service of ${service} sent no response within 1 s` });
    });
  });

  if (gateway.plane === 'haproxy') {
    // Services came with their units and went above: each took a spare backend of the pool, so no
    // reload closed a client's idle keep-alive connection (HAProxy 2.6 does at a reload).
    t.test('HAProxy was not reloaded while services were declared, deployed and deleted', async (t) => {
      t.match(await http('GET', `${gateway.url}/readyz`), { status: 200, body: { haproxy: { reloads: 0 } } });
    });
  }
}

interface LocalUpstream {
  port: number;
  /** Request headers of the upgrade requests it received. */
  upgrades: IncomingHttpHeaders[];
  inFlight: number;
  /** Lets GET /stream send its second chunk. */
  release(): void;
  close(): Promise<void>;
}

async function startLocalUpstream(): Promise<LocalUpstream> {
  let release: () => void = () => undefined;
  const upstream: LocalUpstream = { port: 0, upgrades: [], inFlight: 0, release: () => release(), close: async () => undefined };
  const server: Server = createServer((req, res) => {
    upstream.inFlight += 1;
    res.once('close', () => (upstream.inFlight -= 1));
    const url = new URL(req.url ?? '/', 'http://unit');
    if (url.pathname === '/headers') {
      res.setHeader('connection', 'keep-alive, x-internal');
      res.setHeader('x-internal', 'secret');
      res.setHeader('x-visible', 'yes');
      res.end(JSON.stringify(req.headers));
    } else if (url.pathname === '/count') {
      const hash = createHash('sha256');
      let bytes = 0;
      req.on('data', (chunk: Buffer) => {
        bytes += chunk.length;
        hash.update(chunk);
      });
      req.on('end', () => res.end(JSON.stringify({ bytes, sha256: hash.digest('hex') })));
    } else if (url.pathname === '/stream') {
      res.write('first\n');
      release = () => res.end('second\n');
    } else if (url.pathname === '/status') {
      // A unit's own error, carrying the HAProxy plane's marker header: it must not be rewritten.
      res.statusCode = Number(url.searchParams.get('code') ?? 200);
      res.setHeader('x-platform-unreachable', '1');
      res.end('own answer');
    } else if (url.pathname === '/slow') {
      setTimeout(() => res.end('slow done'), Number(url.searchParams.get('ms') ?? 1000));
    } else {
      res.statusCode = 404;
      res.end();
    }
  });
  const sockets = new WebSocketServer({ server });
  sockets.on('connection', (socket, req) => {
    upstream.upgrades.push(req.headers);
    socket.on('message', (data) => socket.send(`echo: ${String(data)}`));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  upstream.port = (server.address() as AddressInfo).port;
  upstream.close = async () => {
    sockets.close();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  };
  return upstream;
}
