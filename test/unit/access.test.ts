import t from 'tap';
import { decide, isExpired, routeAccess, serviceOf } from '../../src/auth/access.js';
import { parseDuration } from '../../src/auth/duration.js';
import { createServer, connect, type AddressInfo, type Socket } from 'node:net';
import { networkInterfaces } from 'node:os';
import { bearerToken, callerKey, clientAddress, isFromThisMachine, isLocalCall } from '../../src/auth/caller.js';
import { relayedCallerHeaders, relayKeyOf } from '../../src/auth/relayed-caller.js';
import { hashSecret, newSecret } from '../../src/auth/tokens.js';
import { apiRoute, orchestratorApi, type OrchestratorRoute } from '../../src/schemas/api.js';

const read = { name: 'viewer', role: 'read' as const };
const deployAll = { name: 'ci', role: 'deploy' as const };
const deployWeb = { name: 'ci-web', role: 'deploy' as const, services: 'web-*' };
const admin = { name: 'root', role: 'admin' as const };

t.test('an undeclared route needs read for GET and HEAD and admin for every change', async (t) => {
  t.same(routeAccess('GET', undefined), { access: 'read' });
  t.same(routeAccess('HEAD', {}), { access: 'read' });
  for (const method of ['POST', 'PUT', 'PATCH', 'DELETE']) t.same(routeAccess(method, {}), { access: 'admin' }, method);
  t.same(routeAccess('PATCH', { access: 'deploy', service: { param: 'name' } }), { access: 'deploy', service: { param: 'name' } });
  t.same(routeAccess('GET', { access: 'open' }), { access: 'open' });
});

t.test('roles are ordered read < deploy < admin, and a refusal names the role held and needed', async (t) => {
  t.ok(decide(read, 'read', undefined).allowed);
  t.same(decide(read, 'deploy', 'web-a'), { allowed: false, status: 403, message: 'token viewer has the read role; this call needs deploy' });
  t.same(decide(deployAll, 'admin', undefined), { allowed: false, status: 403, message: 'token ci has the deploy role; this call needs admin' });
  t.ok(decide(deployAll, 'deploy', 'db').allowed);
  t.ok(decide(deployAll, 'read', undefined).allowed);
  for (const access of ['read', 'deploy', 'admin', 'open'] as const) t.ok(decide(admin, access, 'anything').allowed, access);
  t.ok(decide(read, 'open', undefined).allowed);
});

t.test('a scoped deploy token deploys only the services its glob matches, and still reads everything', async (t) => {
  t.ok(decide(deployWeb, 'deploy', 'web-a').allowed);
  t.ok(decide(deployWeb, 'deploy', 'web-').allowed);
  t.same(decide(deployWeb, 'deploy', 'db'), { allowed: false, status: 403, message: 'token ci-web may deploy only services matching web-*, not db' });
  t.notOk(decide(deployWeb, 'deploy', 'myweb-a').allowed);
  t.notOk(decide(deployWeb, 'deploy', undefined).allowed, 'a deploy call naming no service is refused to a scoped token');
  t.ok(decide(deployWeb, 'read', 'db').allowed);
  t.notOk(decide({ ...deployWeb, services: 'db' }, 'deploy', 'db2').allowed, 'a literal glob matches only that name');
});

t.test('the service of a call is read from its path parameter or its body', async (t) => {
  t.equal(serviceOf({ param: 'name' }, { name: 'web-a' }, undefined), 'web-a');
  t.equal(serviceOf({ body: 'serviceName' }, {}, { serviceName: 'db' }), 'db');
  t.equal(serviceOf({ body: 'serviceName' }, {}, { serviceName: 7 }), undefined);
  t.equal(serviceOf({ body: 'serviceName' }, {}, null), undefined);
  t.equal(serviceOf(undefined, { name: 'x' }, undefined), undefined);
});

t.test('a token expires at its expiry, not a moment later', async (t) => {
  const at = Date.parse('2030-01-01T00:00:00Z');
  t.notOk(isExpired({}, at));
  t.notOk(isExpired({ expiresAt: '2030-01-01T00:00:00Z' }, at - 1));
  t.ok(isExpired({ expiresAt: '2030-01-01T00:00:00Z' }, at));
});

t.test('durations are numbers with units, summed', async (t) => {
  t.equal(parseDuration('90d'), 90 * 86_400_000);
  t.equal(parseDuration('12h'), 12 * 3_600_000);
  t.equal(parseDuration('1w2d'), 9 * 86_400_000);
  t.equal(parseDuration('30m15s'), 30 * 60_000 + 15_000);
  for (const bad of ['', '90', 'd', '1.5h', '-1d', '1y', '0s', '3651d', ' 1d']) t.throws(() => parseDuration(bad), { name: 'DurationError' }, JSON.stringify(bad));
});

t.test('a secret is plt_ and 256 random bits in URL-safe characters; its hash is hex SHA-256', async (t) => {
  const secret = newSecret();
  t.match(secret, /^plt_[A-Za-z0-9_-]{43}$/);
  t.not(newSecret(), secret);
  t.match(hashSecret(secret), /^[0-9a-f]{64}$/);
  t.equal(hashSecret(secret), hashSecret(secret));
  t.equal(bearerToken(`Bearer ${secret}`), secret);
});

t.test('the Bearer secret is read as the header rule says, whatever the spacing or case', async (t) => {
  const rule = (header: string) => /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1];
  const shapes = ['Bearer ', 'Bearer', 'Bearerx', 'Bearer x', 'Bearer  x', 'Bearer x ', 'Bearer x y', 'Bearer \tx', 'Bearer x\u00a0', 'Bearer x\u00a0y', 'Bearer \u2028', 'BEARER x', 'bearer\tx', 'Basic x', 'Session x', ''];
  // Named with every non-ASCII character escaped: a raw line separator would break the TAP stream.
  const named = (header: string) => JSON.stringify(header).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  for (const header of shapes) t.equal(bearerToken(header), rule(header), named(header));
});

t.test('a local call is one from loopback, on a loopback listener, not forwarded, from an identified process in no container', async (t) => {
  const call = (remoteAddress: string, headers: Record<string, string> = {}) => ({ socket: { remoteAddress }, headers }) as never;
  t.equal(isLocalCall(call('127.0.0.1'), false), false, 'not on a public listener');
  t.equal(isLocalCall(call('10.0.0.5'), true), false);
  t.equal(isLocalCall(call('127.0.0.1', { 'x-forwarded-for': '203.0.113.9' }), true), false);
  t.equal(isLocalCall(call('127.0.0.1', { forwarded: 'for=203.0.113.9' }), true), false);
  t.equal(isLocalCall(call('127.0.0.1', { 'x-platform-caller': '203.0.113.9' }), true), false, 'a call a role relayed is not local');
  t.equal(await isLocalCall(call('127.0.0.1'), true), false, 'a socket the kernel does not know (an injected call) is no local caller');

  // A real loopback connection from this process: in no container, so local.
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => server.close());
  const accepted = new Promise<Socket>((resolve) => server.once('connection', resolve));
  const client = connect((server.address() as AddressInfo).port, '127.0.0.1');
  t.teardown(() => client.destroy());
  const socket = await accepted;
  t.equal(await isLocalCall({ socket, headers: {} } as never, true), true);
  t.equal(isLocalCall({ socket, headers: {} } as never, true), true, 'the answer is kept for the connection: no second lookup');
  const ip = '127.0.0.1';
  t.equal(await callerKey({ ip, socket, headers: {} } as never), `127.0.0.1 uid ${process.getuid!()}`, 'a loopback caller is counted by its uid');
  const proxied = { ip, socket, headers: { 'x-forwarded-for': '10.1.1.1, 198.51.100.7' } } as never;
  t.equal(await callerKey(proxied), '198.51.100.7', "a process of the platform's own user (the gateway) names its client in X-Forwarded-For");
});

t.test("a call from this machine to its own private address (a unit's listener) is from this machine; from another address it is not", async (t) => {
  t.equal(isFromThisMachine({ socket: { remoteAddress: '10.0.0.5', localAddress: '10.0.0.1' }, headers: {} } as never), false, 'another host');
  const own = Object.values(networkInterfaces())
    .flat()
    .find((address) => address && address.family === 'IPv4' && !address.internal)?.address;
  t.ok(own, 'this host has a private IPv4 address');
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, own, resolve));
  t.teardown(() => server.close());
  const accepted = new Promise<Socket>((resolve) => server.once('connection', resolve));
  const client = connect((server.address() as AddressInfo).port, own!);
  t.teardown(() => client.destroy());
  const socket = await accepted;
  t.equal(await isFromThisMachine({ socket, headers: {} } as never), true, `this process, connected to ${own}: platform token bootstrap on the orchestrator's machine (issue 30 item 3)`);
  t.equal(await isLocalCall({ socket, headers: {} } as never, false), false, 'no exemption from tokens on a listener that is not loopback');
});

t.test("a call's client address is the socket's, or the caller a role relayed and signed; X-Forwarded-For of an unknown process is not believed", async (t) => {
  const relayKey = relayKeyOf(Buffer.alloc(32, 7));
  const call = (remoteAddress: string, headers: Record<string, string> = {}) =>
    ({ ip: remoteAddress, socket: { remoteAddress }, headers, server: { accessControl: { relayKey } } }) as never;
  t.equal(clientAddress(call('203.0.113.9')), '203.0.113.9');
  t.equal(clientAddress(call('127.0.0.1', { 'x-forwarded-for': '198.51.100.7' })), '127.0.0.1', 'a local process cannot pick its address');
  t.equal(clientAddress(call('203.0.113.9', { 'x-forwarded-for': '198.51.100.7' })), '203.0.113.9', 'nor a remote one');
  const relayed = relayedCallerHeaders(relayKey, '198.51.100.7');
  t.equal(clientAddress(call('127.0.0.1', relayed)), '198.51.100.7', 'a role passes its caller on');
  t.equal(clientAddress(call('10.0.0.2', relayed)), '198.51.100.7', 'from another machine too');
  t.equal(await callerKey(call('127.0.0.1', relayedCallerHeaders(relayKey, '127.0.0.1 uid 1000'))), '127.0.0.1 uid 1000');
  const forged = relayedCallerHeaders(relayKeyOf(Buffer.alloc(32, 8)), '198.51.100.7');
  t.equal(clientAddress(call('127.0.0.1', forged)), '127.0.0.1', 'a signature under another key is not believed');
  t.equal(clientAddress(call('127.0.0.1', { ...relayed, 'x-platform-caller': '198.51.100.8' })), '127.0.0.1', 'nor a changed name');
  t.equal(clientAddress(call('127.0.0.1', { 'x-platform-caller': '198.51.100.7' })), '127.0.0.1', 'nor an unsigned one');
  t.equal(await callerKey(call('127.0.0.1', { 'x-forwarded-for': '198.51.100.7' })), '127.0.0.1 unidentified', 'a loopback caller the kernel does not know is counted apart');
});

t.test("an orchestrator route's access comes from its API table entry into its config, not its schema", async (t) => {
  const need = (key: OrchestratorRoute) => {
    const route = apiRoute(key);
    t.notOk('access' in route.schema || 'service' in route.schema, `${key}: the schema carries no access`);
    return routeAccess(route.method, route.config);
  };
  for (const key of ['PATCH /services/:name/config/next', 'POST /services/:name/deploy', 'POST /services/:name/rollback', 'POST /services/:name/jobs', 'DELETE /services/:name/jobs/:id', 'PUT /services/:name/jobs/:id/stdin'] as const) {
    t.same(need(key), { access: 'deploy', service: { param: 'name' } }, key);
  }
  t.same(need('GET /tokens'), { access: 'admin' });
  for (const key of ['PUT /registries/:host', 'GET /registries', 'DELETE /registries/:host'] as const) t.same(need(key), { access: 'admin' }, key);
  t.same(need('POST /tokens/bootstrap'), { access: 'open' });
  t.same(need('POST /tokens'), { access: 'admin' });
  t.same(need('DELETE /services/:name'), { access: 'admin' });
  t.same(need('GET /services'), { access: 'read' });
  const declared = Object.keys(orchestratorApi).filter((key) => 'access' in orchestratorApi[key as OrchestratorRoute]);
  t.same(need('POST /certificates'), { access: 'admin' });
  t.same(need('GET /certificates'), { access: 'admin' }, 'a listing of certificates is an admin\'s, like one of tokens');
  t.same(need('DELETE /certificates/:host'), { access: 'admin' });
  t.same(need('GET /services/:name/certificate'), { access: 'read' }, "a service's certificate facts are for every reader (no key in them)");
  t.same(declared.sort(), ['DELETE /services/:name/jobs/:id', 'DELETE /session', 'GET /certificates', 'GET /notifications/deliveries', 'GET /notifications/endpoints', 'GET /registries', 'GET /tokens', 'PATCH /services/:name/config/next', 'POST /services/:name/deploy', 'POST /services/:name/jobs', 'POST /services/:name/rollback', 'POST /session', 'POST /tokens/bootstrap', 'PUT /services/:name/jobs/:id/stdin']);
  t.same(need('POST /session'), { access: 'open' }, 'signing in takes a token rather than needing one');
  t.same(need('GET /session'), { access: 'read' });
});
