import t from 'tap';
import { hostName, isServiceHost } from '../../src/http/host-name.js';
import { isPlatformEndpoint, planRoutes, selfLoops, type RoutedUnit } from '../../src/roles/gateway/route-plan.js';
import { chooseUpstream, type Candidate } from '../../src/roles/gateway/upstream-choice.js';
import { clientAddress, clientResponseHeaders, schemeOf, upstreamRequestHeaders } from '../../src/roles/gateway/forwarded-headers.js';

const domains = { domain: 'platform.local', internalDomain: 'platform.internal' };

t.test('a Host header is matched case-insensitively and without its port', async (t) => {
  t.equal(hostName('Web.Platform.Local:8080'), 'web.platform.local');
  t.equal(hostName('web.platform.local.'), 'web.platform.local');
  t.equal(hostName('web.platform.local'), 'web.platform.local');
  t.equal(hostName('[::1]:8080'), '[::1]');
  t.equal(hostName(undefined), '');
  t.equal(hostName(''), '');
});

t.test('service hosts are one label under either domain', async (t) => {
  t.ok(isServiceHost('web.platform.local', domains));
  t.ok(isServiceHost('web.platform.internal', domains));
  t.notOk(isServiceHost('a.web.platform.local', domains), 'two labels is not a service host');
  t.notOk(isServiceHost('platform.local', domains));
  t.notOk(isServiceHost('127.0.0.1', domains));
  t.notOk(isServiceHost('', domains));
});

const unit = (service: string, instance: number, active: RoutedUnit['active'] = 'active', sub: RoutedUnit['sub'] = 'running', address: string | null = `127.0.0.1:${1000 + instance}`): RoutedUnit => ({
  unit: `${service}-${instance}.service`,
  service,
  active,
  sub,
  ...(address === null ? {} : { address }),
});

t.test('every load-balanced service is reachable internally, only public-facing ones on the public domain', async (t) => {
  const routes = planRoutes(
    [
      { name: 'api', loadBalanced: true, publicFacing: true },
      { name: 'jobs', loadBalanced: true, publicFacing: false },
      { name: 'batch', loadBalanced: false, publicFacing: true },
    ],
    [],
    [],
    domains,
  );
  t.same(
    routes.map((r) => [r.name, r.hosts]),
    [
      ['api', ['api.platform.internal', 'api.platform.local']],
      ['jobs', ['jobs.platform.internal']],
    ],
  );
});

t.test('only running units with an address take requests, draining ones do not, in instance order', async (t) => {
  const [route] = planRoutes(
    [{ name: 'web', loadBalanced: true, publicFacing: false }],
    [
      unit('web', 10),
      unit('web', 2),
      unit('web', 3, 'deactivating', 'running'),
      unit('web', 4, 'activating', 'start-pre'),
      unit('web', 5, 'failed', 'auto-restart'),
      unit('web', 6, 'active', 'running', null),
      unit('other', 1, 'active', 'running', '127.0.0.1:9999'),
    ],
    [],
    domains,
  );
  t.same(route!.targets, [
    { unit: 'web-2.service', address: '127.0.0.1:1002' },
    { unit: 'web-10.service', address: '127.0.0.1:1010' },
  ]);
});

t.test('two statuses of one unit at one address (old and new slot) give one target', async (t) => {
  const [route] = planRoutes([{ name: 'web', loadBalanced: true, publicFacing: false }], [unit('web', 1), unit('web', 1)], [], domains);
  t.equal(route!.targets.length, 1);
});

t.test('components are routed when announced: the orchestrator and web on both domains, the others internally', async (t) => {
  const routes = planRoutes(
    [],
    [],
    [
      { component: 'orchestrator', address: '127.0.0.1:9000' },
      { component: 'scheduler', address: '127.0.0.1:9002' },
      { component: 'gateway', address: '127.0.0.1:8080' },
    ],
    domains,
  );
  t.same(
    routes.map((r) => [r.name, r.kind, r.hosts, r.targets]),
    [
      ['orchestrator', 'component', ['orchestrator.platform.internal', 'orchestrator.platform.local'], [{ address: '127.0.0.1:9000', unit: 'orchestrator' }]],
      ['scheduler', 'component', ['scheduler.platform.internal'], [{ address: '127.0.0.1:9002', unit: 'scheduler' }]],
    ],
  );
});

const candidates = (...inFlight: number[]): Candidate[] => inFlight.map((n) => ({ inFlight: n, avoidUntil: 0 }));

t.test('idle units are chosen in round-robin order', async (t) => {
  const units = candidates(0, 0, 0);
  let cursor = 0;
  const chosen: number[] = [];
  for (let i = 0; i < 6; i++) {
    const index = chooseUpstream(units, cursor, 0);
    chosen.push(index);
    cursor = index + 1;
  }
  t.same(chosen, [0, 1, 2, 0, 1, 2]);
});

t.test('the unit with the fewest requests in flight is chosen', async (t) => {
  t.equal(chooseUpstream(candidates(3, 1, 2), 0, 0), 1);
  t.equal(chooseUpstream(candidates(2, 2, 1), 1, 0), 2);
  t.equal(chooseUpstream([], 0, 0), -1);
});

t.test('a unit that refused a connection is avoided while another is left', async (t) => {
  const units = candidates(0, 5);
  units[0]!.avoidUntil = 1000;
  t.equal(chooseUpstream(units, 0, 500), 1);
  t.equal(chooseUpstream(units, 0, 1500), 0, 'after the pause it is chosen again');
  t.equal(chooseUpstream([units[0]!], 0, 500), 0, 'the only unit is still tried');
});

t.test('a retry goes to another unit, or to the same one when it is the only one', async (t) => {
  const units = candidates(0, 0);
  t.equal(chooseUpstream(units, 0, 0, units[0]), 1);
  t.equal(chooseUpstream([units[0]!], 0, 0, units[0]), 0);
});

t.test('X-Forwarded-Proto says https for requests on the TLS listener (its sockets are encrypted)', async (t) => {
  t.equal(schemeOf({ socket: { encrypted: true } }), 'https');
  t.equal(schemeOf({ socket: {} }), 'http');
});

t.test('hop-by-hop headers and those Connection names stay on their hop; X-Forwarded-* are set', async (t) => {
  const headers = upstreamRequestHeaders(
    ['Host', 'web.platform.local:8080', 'Connection', 'keep-alive, X-Secret', 'X-Secret', 's', 'Keep-Alive', 'timeout=5', 'TE', 'trailers',
      'Transfer-Encoding', 'chunked', 'Proxy-Authorization', 'Basic x', 'X-Forwarded-For', '10.0.0.1', 'X-Forwarded-Proto', 'https', 'Accept', '*/*'],
    { clientAddress: '127.0.0.1', host: 'web.platform.local:8080', proto: 'http' },
  );
  t.same(headers, [
    'host', 'web.platform.local:8080', 'accept', '*/*',
    'x-forwarded-for', '10.0.0.1, 127.0.0.1', 'x-forwarded-proto', 'http', 'x-forwarded-host', 'web.platform.local:8080',
  ]);
});

t.test('an upgrade request keeps Connection: upgrade and its Upgrade header', async (t) => {
  const headers = upstreamRequestHeaders(['Host', 'ws.platform.internal', 'Connection', 'Upgrade', 'Upgrade', 'websocket'], {
    clientAddress: '127.0.0.1',
    host: 'ws.platform.internal',
    proto: 'http',
    upgrade: 'websocket',
  });
  t.same(headers.slice(-4), ['connection', 'upgrade', 'upgrade', 'websocket']);
  t.equal(headers.filter((h) => h === 'connection').length, 1);
});

t.test('response hop-by-hop headers are dropped, repeated headers kept', async (t) => {
  const headers = clientResponseHeaders(['Content-Type', 'text/plain', 'Connection', 'close, X-Internal', 'X-Internal', '1', 'Set-Cookie', 'a=1', 'Set-Cookie', 'b=2', 'Transfer-Encoding', 'chunked'].map((v) => Buffer.from(v, 'latin1')));
  t.same(headers, ['content-type', 'text/plain', 'set-cookie', 'a=1', 'set-cookie', 'b=2']);
  t.equal(clientAddress('::ffff:10.1.2.3'), '10.1.2.3');
});

t.test('a unit announced where the platform listens on this machine is left out of its route; the same port elsewhere is routed', async (t) => {
  const platform = { hosts: new Set(['10.0.0.5', '[fd00::5]', 'node-a']), ports: new Set([8080, 9000, 41234]) };
  const at = (instance: number, address: string) => unit('web', instance, 'active', 'running', address);
  const units = [
    at(1, '127.0.0.1:8080'),
    at(2, '127.0.0.2:9000'),
    at(3, 'localhost:41234'),
    at(4, '[::1]:8080'),
    at(5, '10.0.0.5:8080'),
    at(6, '[FD00::5]:9000'),
    at(7, 'node-a:41234'),
    at(8, '0.0.0.0:8080'),
    at(9, '10.0.0.6:8080'),
    at(10, '127.0.0.1:8081'),
  ];
  const [web] = planRoutes([{ name: 'web', loadBalanced: true, publicFacing: false }], units, [], domains, platform);
  t.same(web!.targets.map((target) => target.address), ['10.0.0.6:8080', '127.0.0.1:8081'], 'another machine on a platform port, this one on a unit port');
  t.same(selfLoops(units, platform).map((u) => u.unit), units.slice(0, 8).map((u) => u.unit), 'the left-out ones, for the log');
  t.notOk(isPlatformEndpoint('127.0.0.1:8080', { hosts: new Set(), ports: new Set() }), 'nothing known, nothing left out');
  t.same(selfLoops([unit('web', 1, 'activating', 'start-pre', '127.0.0.1:8080')], platform), [], 'a unit not routed is no self-loop');
});

t.test('a held service (a handover under way) is marked with its hold\'s end; other routes are not', async (t) => {
  const routes = planRoutes(
    [
      { name: 'db', loadBalanced: true, publicFacing: false },
      { name: 'web', loadBalanced: true, publicFacing: false },
    ],
    [unit('db', 1), unit('web', 2)],
    [],
    domains,
    undefined,
    new Map([['db', 1_700_000_000_000]]),
  );
  t.same(
    routes.map((route) => [route.name, route.targets.length, route.heldUntil]),
    [
      ['db', 1, 1_700_000_000_000],
      ['web', 1, undefined],
    ],
  );
});
