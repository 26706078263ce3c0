import t from 'tap';
import { connect } from 'node:net';
import { networkInterfaces } from 'node:os';
import { request } from 'undici';
import { startEtcd } from '../harness/etcd.js';
import { freePort } from '../harness/free-port.js';
import { http, serveRole } from '../harness/platform.js';

// DNS rebinding and request targets, with the requests of the outside audit (issue 14): a page on
// attacker.example whose name re-resolves to 127.0.0.1 makes the browser send `Host:
// attacker.example:9000` to `platform up`'s roles, which answered 200. Every role runs as its own
// process, as `platform up` runs them (loopback listener, --auth auto), on real etcd.

const etcd = await startEtcd();
const flags = ['--etcd', etcd.url, '--announce-ttl', '3'];
const directory = await serveRole('directory', await freePort(), flags);
const scheduler = await serveRole('scheduler', await freePort(), flags);
const orchestrator = await serveRole('orchestrator', await freePort(), flags);
// The rule is about the agent's HTTP API: it starts and answers without a Docker engine to manage.
const agent = await serveRole('agent', await freePort(), [...flags, '--machine-id', 'rebinding-test'], { DOCKER_HOST: 'unix:///nonexistent/docker.sock' });
const gateway = await serveRole('gateway', await freePort(), flags);
const web = await serveRole('web', await freePort(), flags);
// On every address of the machine, naming attacker.example as its own (roles no other role calls:
// a directory there would be announced and called by the orchestrator from a non-local address).
const everywherePort = await freePort();
const everywhere = await serveRole('web', everywherePort, [...flags, '--host', '0.0.0.0', '--allowed-host', 'attacker.example']);
// Names from the environment: a domain and every name under it.
const fromEnv = await serveRole('gateway', await freePort(), flags, { PLATFORM_ALLOWED_HOSTS: '.attacker.example' });
const processes = [directory, scheduler, orchestrator, agent, gateway, web, everywhere, fromEnv];
t.teardown(async () => {
  await Promise.all(processes.map((role) => role.stop()));
  await etcd.stop();
});

const portOf = (url: string) => new URL(url).port;

/** A GET with the Host header given (fetch would not let a test set it). */
async function getWithHost(url: string, host: string, headers: Record<string, string> = {}): Promise<{ status: number; body: any; headers: Record<string, unknown> }> {
  const response = await request(url, { headers: { ...headers, host }, headersTimeout: 10_000 });
  const text = await response.body.text();
  return { status: response.statusCode, body: text.startsWith('{') || text.startsWith('[') ? JSON.parse(text) : text, headers: response.headers };
}

/** One request as bytes on a socket, for targets no client library sends: the status line and the body. */
function rawRequest(url: string, head: string): Promise<{ status: number; body: string }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => socket.write(`${head}\r\nConnection: close\r\n\r\n`));
    let text = '';
    socket.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
    socket.on('error', reject);
    socket.on('end', () => resolve({ status: Number(text.split(' ')[1]), body: text.slice(text.indexOf('\r\n\r\n') + 4) }));
  });
}

const rule = /^Host attacker\.example:\d+ is not a name of this platform \(the DNS-rebinding rule\): a role answers only its listen and advertise addresses, localhost and the --allowed-host list; if attacker\.example is yours, start the roles with --allowed-host attacker\.example \(or PLATFORM_ALLOWED_HOSTS\)$/;

// One read of each role's API, as the audit sent it: answered 200 before.
const reads = [
  { role: 'orchestrator', url: () => `${orchestrator.url}/services` },
  { role: 'directory', url: () => `${directory.url}/services` },
  { role: 'scheduler', url: () => `${scheduler.url}/deployments` },
  { role: 'agent', url: () => `${agent.url}/units` },
  { role: 'web', url: () => `${web.url}/session` },
  { role: 'gateway', url: () => `${gateway.url}/routes` },
];

t.test('every API role answers Host: attacker.example:<port> with 421 naming the rule and the flag; its own address still gets 200', async (t) => {
  for (const read of reads) {
    const url = read.url();
    const port = portOf(url);
    const foreign = await getWithHost(url, `attacker.example:${port}`);
    t.equal(foreign.status, 421, `${read.role}: ${JSON.stringify(foreign.body)}`);
    t.match(foreign.body, { statusCode: 421, error: 'Misdirected Request', message: rule }, read.role);
    for (const own of [`127.0.0.1:${port}`, `localhost:${port}`, 'localhost']) {
      const reply = await getWithHost(url, own);
      t.equal(reply.status, 200, `${read.role} under Host ${own}: ${JSON.stringify(reply.body)}`);
    }
  }
});

t.test('/healthz answers any Host: a load balancer probes by address and learns only that the role lives', async (t) => {
  for (const read of reads) {
    const { origin } = new URL(read.url());
    t.match(await getWithHost(`${origin}/healthz`, 'attacker.example'), { status: 200, body: { status: 'ok' } }, read.role);
  }
  t.equal((await getWithHost(`${orchestrator.url}/readyz`, 'attacker.example')).status, 421, '/readyz, which names the store and the auth mode, does not');
});

t.test("the gateway's data plane still routes by Host, answering names it does not know 404", async (t) => {
  const proxied = await getWithHost(`${gateway.url}/`, `attacker.example:${portOf(gateway.url)}`);
  t.match(proxied, { status: 404, body: { message: 'no service is reachable at attacker.example' } });
});

t.test('--allowed-host and PLATFORM_ALLOWED_HOSTS make the name the role answers; a 0.0.0.0 listener answers the machine\'s addresses', async (t) => {
  const docs = (url: string) => `${url}/documentation/json`;
  t.equal((await getWithHost(docs(everywhere.url), `attacker.example:${everywherePort}`)).status, 200, '--allowed-host attacker.example');
  t.equal((await getWithHost(docs(everywhere.url), `sub.attacker.example:${everywherePort}`)).status, 421, 'an exact name takes no subdomains');
  t.equal((await getWithHost(docs(fromEnv.url), `attacker.example:${portOf(fromEnv.url)}`)).status, 200, 'PLATFORM_ALLOWED_HOSTS=.attacker.example');
  t.equal((await getWithHost(docs(fromEnv.url), 'api.attacker.example')).status, 200, 'and its subdomains');
  t.equal((await getWithHost(docs(fromEnv.url), 'attacker.example.evil')).status, 421);
  const addresses = Object.values(networkInterfaces()).flatMap((list) => list ?? []);
  for (const address of addresses) {
    const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
    if (address.address.startsWith('fe80')) continue; // a link-local Host needs its zone, which no browser sends
    t.equal((await getWithHost(docs(everywhere.url), `${host}:${everywherePort}`)).status, 200, `interface address ${host}`);
  }
  t.equal((await getWithHost(docs(everywhere.url), `evil.example:${everywherePort}`)).status, 421, 'a name not listed still gets 421');
});

t.test('the dashboard session is not honoured under a foreign Host: the 421 comes before the cookie is read', async (t) => {
  const bootstrap = await http('POST', `${orchestrator.url}/tokens/bootstrap`);
  t.equal(bootstrap.status, 201, JSON.stringify(bootstrap.body));
  const foreignSignIn = await request(`${web.url}/session`, {
    method: 'POST',
    headers: { host: `attacker.example:${portOf(web.url)}`, 'content-type': 'application/json' },
    body: JSON.stringify({ token: bootstrap.body.secret }),
  });
  t.equal(foreignSignIn.statusCode, 421, 'no sign-in under a foreign Host');
  t.equal(foreignSignIn.headers['set-cookie'], undefined, 'and no cookie');
  await foreignSignIn.body.dump();
  const signIn = await http('POST', `${web.url}/session`, { token: bootstrap.body.secret });
  const cookie = signIn.headers.get('set-cookie')!.split(';')[0]!;
  const session = { cookie, 'x-platform-session-proof': signIn.body.proof as string };
  const own = await getWithHost(`${web.url}/session`, `127.0.0.1:${portOf(web.url)}`, session);
  t.match(own, { status: 200, body: { via: 'session', token: { name: 'bootstrap' } } });
  for (const path of ['/session', '/services']) {
    const foreign = await getWithHost(`${web.url}${path}`, `attacker.example:${portOf(web.url)}`, session);
    t.match(foreign, { status: 421, body: { message: rule } }, `GET ${path} with the session cookie`);
  }
  const direct = await getWithHost(`${orchestrator.url}/services`, `attacker.example:${portOf(orchestrator.url)}`, session);
  t.equal(direct.status, 421, 'nor on the orchestrator');
});

t.test('an absolute-form request target is a 400 on every role (the web role answered 503, the others served it)', async (t) => {
  // The gateway's data plane is a proxy and routes by Host: an absolute-form target is not one of its own paths there.
  for (const read of reads.filter(({ role }) => role !== 'gateway')) {
    const { origin, pathname } = new URL(read.url());
    const reply = await rawRequest(origin, `GET http://x${pathname} HTTP/1.1\r\nHost: 127.0.0.1`);
    t.equal(reply.status, 400, `${read.role}: ${reply.body}`);
    t.match(JSON.parse(reply.body), { statusCode: 400, message: /^the request target must be a path such as \/services \(origin-form\): absolute-form targets are for proxies/ }, read.role);
  }
  const webServices = await rawRequest(web.url, 'GET http://x/services HTTP/1.1\r\nHost: 127.0.0.1');
  t.equal(webServices.status, 400, 'the exact request of the audit');
});

t.test("the dashboard proxy resolves /services/../metrics before its allow-list: the orchestrator's /metrics is not reached", async (t) => {
  for (const path of ['/services/../metrics', '/services/%2e%2e/metrics', '/services/%2E%2E/metrics', '/services/web/../../metrics']) {
    const reply = await rawRequest(web.url, `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1`);
    t.equal(reply.status, 404, `${path}: ${reply.body.slice(0, 200)}`);
    t.match(JSON.parse(reply.body), { statusCode: 404, message: /^no route GET \/metrics: the dashboard passes on only \/services, / }, path);
  }
  for (const path of ['/services/../../metrics', '/services/..%2f..%2fmetrics', '/services/%2e%2e%5cmetrics']) {
    const reply = await rawRequest(web.url, `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1`);
    t.equal(reply.status, 400, `${path}: ${reply.body.slice(0, 200)}`);
    t.match(JSON.parse(reply.body), { statusCode: 400, message: / is not passed on to the orchestrator: / }, path);
  }
  const resolved = await rawRequest(web.url, 'GET /deployments/../services HTTP/1.1\r\nHost: 127.0.0.1');
  t.equal(resolved.status, 200, 'a path that resolves into the allow-list is passed on, resolved');
  t.match(resolved.body, /\[\]/, 'the orchestrator answered GET /services');
});
