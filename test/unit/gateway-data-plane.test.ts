import t from 'tap';
import { ConfigError, resolveConfig } from '../../src/config.js';
import { chooseDataPlane } from '../../src/roles/gateway/data-plane.js';
import { gatewayListeners } from '../../src/roles/gateway/listener-policy.js';

// Choosing the gateway's data plane and its listeners.

t.test('--data-plane takes auto, haproxy or node, from the flag or PLATFORM_GATEWAY_DATA_PLANE; auto by default', async (t) => {
  t.equal(resolveConfig({}, {}).gateway.dataPlane, 'auto');
  t.equal(resolveConfig({}, { PLATFORM_GATEWAY_DATA_PLANE: 'node' }).gateway.dataPlane, 'node');
  t.equal(resolveConfig({ dataPlane: 'haproxy' }, { PLATFORM_GATEWAY_DATA_PLANE: 'node' }).gateway.dataPlane, 'haproxy', 'the flag wins');
  t.throws(() => resolveConfig({ dataPlane: 'nginx' }, {}), new ConfigError('--data-plane must be auto, haproxy or node, got nginx'));
  t.equal(resolveConfig({}, { PLATFORM_HAPROXY_BIN: '/opt/haproxy' }).gateway.haproxyBin, '/opt/haproxy');
  t.throws(() => resolveConfig({ internalPort: '70000' }, {}), /--internal-port must be an integer from 1 to 65535, got 70000/);
});

t.test('auto falls back to Node without a usable haproxy; haproxy refuses to start without one, naming the flag', async (t) => {
  t.equal(await chooseDataPlane('auto', '/nonexistent/haproxy'), 'node');
  t.equal(await chooseDataPlane('node', '/usr/sbin/haproxy'), 'node');
  await t.rejects(chooseDataPlane('haproxy', '/nonexistent/haproxy'), /--data-plane haproxy needs HAProxy 2\.6 or later: \/nonexistent\/haproxy does not run/);
  t.equal(await chooseDataPlane('auto', '/usr/sbin/haproxy'), 'haproxy', "Debian's haproxy (a test package) is recent enough");
});

t.test('a loopback listener serves both domains; any other gets an internal listener on port + 1 by default', async (t) => {
  const settings = resolveConfig({}, {}).gateway;
  t.same(gatewayListeners('127.0.0.1', 8080, settings, '127.0.0.1'), { public: { host: '127.0.0.1', port: 8080, policy: { internalDomain: true } } });
  const open = gatewayListeners('0.0.0.0', 80, settings, '10.0.0.1');
  t.same(open.internal, { host: '127.0.0.1', port: 81 });
  t.equal(open.public.policy.internalDomain, false);
  t.ok(open.public.policy.ownHosts?.has('10.0.0.1'), 'its advertised address is its own');
  t.ok(open.public.policy.ownHosts?.has('127.0.0.1'), 'with 0.0.0.0, every address of the machine is');
  t.notOk(open.public.policy.ownHosts?.has('web.platform.local'));
  const pinned = gatewayListeners('10.0.0.1', 80, resolveConfig({ internalHost: '10.1.0.1', internalPort: '8081' }, {}).gateway, '10.0.0.1');
  t.same(pinned.internal, { host: '10.1.0.1', port: 8081 });
});
