import t from 'tap';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage } from 'node:http';
import { connect as tcpConnect, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { startEtcd } from '../harness/etcd.js';
import { freePort } from '../harness/free-port.js';
import { testedDataPlanes } from '../harness/gateway-cluster.js';
import { startBareHost } from '../harness/test-hosts.js';
import { makeServerCertificate } from '../harness/tls-certificates.js';
import { waitFor } from '../harness/wait.js';
import { openStore } from '../../src/store/open-store.js';
import { serviceKey, tokenPrefix, unitStatusKey } from '../../src/store/keys.js';
import { checkCertificate } from '../../src/certificates/certificate-check.js';
import { putCertificate } from '../../src/certificates/certificate-records.js';
import { issueToken } from '../../src/auth/tokens.js';

// The audit's hostile requests (H1, H2, L6, L7), the same against both data planes. The gateway and
// an orchestrator run in a test host (a network namespace), as on a machine of their own; this
// test process is the remote client, reaching the gateway's public address from the bridge. The
// unit is a Node server on the bridge that records every request it gets, parsed or as raw bytes,
// and answers an upgrade request with a plain 200 (a unit that speaks no WebSocket).

const DOMAIN = 'platform.local';
const host = startBareHost();
const etcd = await startEtcd({ host: host.bridgeAddress });
const store = await openStore({ etcd: [etcd.url], dataDir: '' });
const dir = mkdtempSync(join(tmpdir(), 'platform-hostile-'));

/** What the unit received: a parsed request's head, or bytes it got after answering an upgrade. */
type Seen = { url: string; headers: Record<string, string | string[] | undefined> } | { raw: string };
const seen: Seen[] = [];
const unit = createServer((req, res) => {
  seen.push({ url: req.url ?? '', headers: req.headers });
  res.end('unit\n');
});
const upgraded = new Set<Socket>();
unit.on('upgrade', (req: IncomingMessage, socket: Socket) => {
  seen.push({ url: req.url ?? '', headers: req.headers });
  upgraded.add(socket);
  socket.on('error', () => undefined);
  socket.write('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 14\r\n\r\nno websockets\n');
  socket.on('data', (chunk: Buffer) => {
    seen.push({ raw: chunk.toString('latin1') });
    socket.write('HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nraw\n');
  });
});
await new Promise<void>((resolve) => unit.listen(0, host.bridgeAddress, resolve));

t.teardown(async () => {
  unit.closeAllConnections();
  // Sockets handed to the upgrade listener are the listener's to close.
  for (const socket of upgraded) socket.destroy();
  await new Promise((resolve) => unit.close(resolve));
  await store.close();
  await etcd.stop();
  host.stop();
  rmSync(dir, { recursive: true, force: true });
});

await store.put(serviceKey('shop'), JSON.stringify({ name: 'shop', loadBalanced: true, publicFacing: true }));
await store.put(
  unitStatusKey('local', 'shop-1.service@x'),
  JSON.stringify({
    unit: 'shop-1.service',
    service: 'shop',
    instance: 1,
    machine: 'local',
    active: 'active',
    sub: 'running',
    address: `${host.bridgeAddress}:${(unit.address() as AddressInfo).port}`,
  }),
);
const certificate = makeServerCertificate(dir, 'shop', [`shop.${DOMAIN}`]);
const [chain, key] = [readFileSync(certificate.cert, 'utf8'), readFileSync(certificate.key, 'utf8')];
await putCertificate(store, { ...checkCertificate(`shop.${DOMAIN}`, chain, key, 'operator', Date.now()), chain, key });
const ca = readFileSync(certificate.ca, 'utf8');

// The orchestrator as on a one-machine install: on the host's loopback, --auth auto.
const orchestratorPort = await freePort();
const etcdFlags = ['--etcd', etcd.url];
const orchestrator = host.run(['serve', '--role', 'orchestrator', '--host', '127.0.0.1', '--port', String(orchestratorPort), ...etcdFlags, '--auth', 'auto']);
t.teardown(() => orchestrator.stop());

interface Answer {
  status: number;
  head: string;
  body: string;
}

/** A client connection that writes requests as given and reads the answers one at a time. */
class Conversation {
  private buffer = Buffer.alloc(0);
  private closed = false;
  private wake: (() => void) | undefined;

  constructor(readonly socket: Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.buffer = Buffer.concat([this.buffer, chunk]);
      this.wake?.();
    });
    socket.on('error', () => undefined);
    socket.on('close', () => {
      this.closed = true;
      this.wake?.();
    });
  }

  send(text: string): this {
    this.socket.write(text, 'latin1');
    return this;
  }

  /** The next complete answer, or `closed` when the connection closes first. */
  async answer(): Promise<Answer | 'closed'> {
    for (;;) {
      const parsed = this.parse();
      if (parsed !== undefined) return parsed;
      if (this.closed) return 'closed';
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }

  close(): void {
    this.socket.destroy();
  }

  private parse(): Answer | undefined {
    const end = this.buffer.indexOf('\r\n\r\n');
    if (end === -1) return undefined;
    const head = this.buffer.subarray(0, end).toString('latin1');
    const length = /\r\ncontent-length:\s*(\d+)/i.exec(head);
    const bodyStart = end + 4;
    let bodyEnd: number;
    if (length) bodyEnd = bodyStart + Number(length[1]);
    else if (/\r\ntransfer-encoding:\s*chunked/i.test(head)) {
      const last = this.buffer.indexOf('0\r\n\r\n', bodyStart);
      if (last === -1) return undefined;
      bodyEnd = last + 5;
    } else if (this.closed) bodyEnd = this.buffer.length;
    else return undefined;
    if (this.buffer.length < bodyEnd) return undefined;
    const body = this.buffer.subarray(bodyStart, bodyEnd).toString('latin1');
    this.buffer = this.buffer.subarray(bodyEnd);
    return { status: Number(/^HTTP\/1\.[01] (\d{3})/.exec(head)?.[1] ?? 0), head, body };
  }
}

const plain = (port: number): Promise<Conversation> =>
  new Promise((resolve, reject) => {
    const socket = tcpConnect({ host: host.address, port });
    socket.once('connect', () => resolve(new Conversation(socket)));
    socket.once('error', reject);
  });

const overTls = (port: number, servername: string): Promise<Conversation> =>
  new Promise((resolve, reject) => {
    const socket = tlsConnect({ host: host.address, port, servername, ca, ALPNProtocols: ['http/1.1'] });
    socket.once('secureConnect', () => resolve(new Conversation(socket)));
    socket.once('error', reject);
  });

const request = (method: string, target: string, hostHeader: string, headers: string[] = [], body = ''): string =>
  `${method} ${target} HTTP/1.1\r\nhost: ${hostHeader}\r\n${headers.map((line) => `${line}\r\n`).join('')}` +
  `${body === '' ? '' : `content-length: ${Buffer.byteLength(body)}\r\n`}\r\n${body}`;

/** Every X-Forwarded-For the unit saw on requests for `path`, parsed or raw. */
function forwardedForOn(path: string): string[] {
  const found: string[] = [];
  for (const entry of seen) {
    if ('raw' in entry) {
      if (!entry.raw.includes(` ${path} HTTP/1.1`)) continue;
      found.push(/\r\nx-forwarded-for:\s*([^\r]*)/i.exec(entry.raw)?.[1] ?? '(none)');
    } else if (entry.url === path) found.push(String(entry.headers['x-forwarded-for'] ?? '(none)'));
  }
  return found;
}

const lastEntry = (forwardedFor: string): string => forwardedFor.split(',').pop()!.trim();

for (const plane of testedDataPlanes()) t.test(`the ${plane} data plane`, async (t) => {
  const httpsPort = await freePort();
  const gatewayDir = mkdtempSync(join(dir, `gateway-${plane}-`));
  const gateway = await host.serve('gateway', [...etcdFlags, '--data-plane', plane, '--data-dir', gatewayDir, '--https-port', String(httpsPort), '--expose-components']);
  t.teardown(() => gateway.stop());
  const port = Number(new URL(gateway.url).port);
  await waitFor(async () => {
    const conversation = await plain(port);
    const answer = await conversation.send(request('GET', '/healthz', `orchestrator.${DOMAIN}`)).answer();
    conversation.close();
    return answer !== 'closed' && answer.status === 200;
  }, 60_000, { what: `the ${plane} gateway to route the orchestrator` });
  await waitFor(async () => {
    const conversation = await overTls(httpsPort, `shop.${DOMAIN}`).catch(() => undefined);
    const answer = await conversation?.send(request('GET', '/', `shop.${DOMAIN}`)).answer();
    conversation?.close();
    return answer !== undefined && answer !== 'closed' && answer.status === 200;
  }, 30_000, { what: `the ${plane} gateway to serve shop over HTTPS` });

  await t.test(`H1 (${plane}): HTTPS with a public host's SNI does not serve the internal domain`, async (t) => {
    const before = seen.length;
    for (const internal of [`shop.${DOMAIN.replace('local', 'internal')}`, 'scheduler.platform.internal']) {
      const conversation = await overTls(httpsPort, `shop.${DOMAIN}`);
      const answer = await conversation.send(request('GET', '/', internal)).answer();
      conversation.close();
      t.not(answer, 'closed');
      if (answer === 'closed') return;
      t.equal(answer.status, 404, `${internal} is an unknown host on the public HTTPS listener`);
      t.same(JSON.parse(answer.body), { statusCode: 404, error: 'Not Found', message: `no service is reachable at ${internal}` });
    }
    t.equal(seen.length, before, 'the unit got no request');
  });

  await t.test(`H2 (${plane}): after a unit's non-101 answer to an upgrade, the next request never reaches the unit unparsed`, async (t) => {
    const conversation = await plain(port);
    const upgrade = ['connection: upgrade', 'upgrade: websocket', 'sec-websocket-version: 13', 'sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ=='];
    const first = await conversation.send(request('GET', `/first-${plane}`, `shop.${DOMAIN}`, upgrade)).answer();
    t.not(first, 'closed');
    if (first === 'closed') return;
    t.equal(first.status, 200, "the unit's answer reaches the client");
    t.equal(first.body, 'no websockets\n');
    const second = await conversation.send(request('GET', `/second-${plane}`, `shop.${DOMAIN}`, ['x-forwarded-for: 6.6.6.6'])).answer();
    conversation.close();
    const forwarded = forwardedForOn(`/second-${plane}`);
    if (second === 'closed') t.same(forwarded, [], 'the gateway closed the connection: the unit got nothing more');
    else for (const value of forwarded) t.equal(lastEntry(value), host.bridgeAddress, `the second request came through the gateway (X-Forwarded-For: ${value})`);
  });

  await t.test(`H2 (${plane}): a remote client mints no token through an upgrade the orchestrator answers with 200`, async (t) => {
    const tokensBefore = (await store.list(tokenPrefix)).length;
    const conversation = await plain(port);
    const upgrade = ['connection: upgrade', 'upgrade: websocket', 'sec-websocket-version: 13', 'sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ=='];
    const first = await conversation.send(request('GET', '/healthz', `orchestrator.${DOMAIN}`, upgrade)).answer();
    t.not(first, 'closed');
    const mint = JSON.stringify({ name: `stolen-${plane}`, role: 'admin' });
    const second = await conversation.send(request('POST', '/tokens', `orchestrator.${DOMAIN}`, ['content-type: application/json'], mint)).answer();
    conversation.close();
    if (second !== 'closed') t.equal(second.status, 401, `the orchestrator asked for a token: ${second.body}`);
    t.equal((await store.list(tokenPrefix)).length, tokensBefore, 'no token was issued');
  });

  await t.test(`H2 (${plane}): a Connection header naming X-Forwarded-For does not make a remote client a local caller`, async (t) => {
    const tokensBefore = (await store.list(tokenPrefix)).length;
    const conversation = await plain(port);
    const mint = JSON.stringify({ name: `named-${plane}`, role: 'admin' });
    const headers = ['content-type: application/json', 'connection: keep-alive, x-forwarded-for, x-forwarded-proto, x-forwarded-host'];
    const answer = await conversation.send(request('POST', '/tokens', `orchestrator.${DOMAIN}`, headers, mint)).answer();
    conversation.close();
    t.not(answer, 'closed');
    if (answer !== 'closed') t.equal(answer.status, 401, `the orchestrator asked for a token: ${answer.body}`);
    t.equal((await store.list(tokenPrefix)).length, tokensBefore, 'no token was issued');
  });

  await t.test(`L6 (${plane}): an absolute-form request target is refused with 400 naming the rule`, async (t) => {
    const before = seen.length;
    // An authority other than the Host is refused by HAProxy's parser, with its own page: the status is the rule there.
    for (const [target, fromGateway] of [[`http://shop.${DOMAIN}/`, true], ['http://elsewhere.example/', plane === 'node']] as const) {
      const conversation = await plain(port);
      const answer = await conversation.send(request('GET', target, `shop.${DOMAIN}`)).answer();
      conversation.close();
      t.not(answer, 'closed');
      if (answer === 'closed') return;
      t.equal(answer.status, 400, target);
      if (!fromGateway) continue;
      t.same(JSON.parse(answer.body), {
        statusCode: 400,
        error: 'Bad Request',
        message: 'request target: must be a path (origin-form, starting with /); the gateway is no forward proxy',
      });
    }
    t.equal(seen.length, before, 'the unit got no request');
  });

  await t.test(`L7 (${plane}): the client's Forwarded and X-Real-IP are dropped; X-Forwarded-* carry the gateway's view`, async (t) => {
    const conversation = await plain(port);
    const claims = ['forwarded: for=6.6.6.6;proto=https', 'x-real-ip: 6.6.6.6', 'x-forwarded-for: 6.6.6.6', 'x-forwarded-proto: https', 'x-forwarded-host: evil.example'];
    const answer = await conversation.send(request('GET', `/claims-${plane}`, `shop.${DOMAIN}`, claims)).answer();
    conversation.close();
    t.not(answer, 'closed');
    const got = seen.find((entry): entry is Extract<Seen, { url: string }> => 'url' in entry && entry.url === `/claims-${plane}`);
    t.ok(got, 'the unit got the request');
    t.equal(got?.headers.forwarded, undefined, 'no Forwarded');
    t.equal(got?.headers['x-real-ip'], undefined, 'no X-Real-IP');
    t.equal(lastEntry(String(got?.headers['x-forwarded-for'])), host.bridgeAddress, 'X-Forwarded-For ends with the address the gateway saw');
    t.equal(got?.headers['x-forwarded-proto'], 'http');
    t.equal(got?.headers['x-forwarded-host'], `shop.${DOMAIN}`);
  });

  await t.test(`L7 (${plane}): /readyz tells an anonymous remote caller only ready or not; a token shows the details`, async (t) => {
    const own = `${host.address}:${port}`;
    const anonymous = await fetch(`http://${own}/readyz`);
    t.equal(anonymous.status, 200);
    t.same(await anonymous.json(), { status: 'ready' });
    const issued = await issueToken(store, { name: `reader-${plane}`, role: 'read' });
    const withToken = await waitFor(async () => {
      const answer = await fetch(`http://${own}/readyz`, { headers: { authorization: `Bearer ${issued!.secret}` } });
      const body = (await answer.json()) as Record<string, unknown>;
      return body.role === 'gateway' ? body : undefined;
    }, 10_000, { what: 'the gateway to know the new token' });
    t.match(withToken, { status: 'ready', role: 'gateway', dataPlane: plane, store: String });
  });
});
