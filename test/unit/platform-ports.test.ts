import t from 'tap';
import { ConfigError, listenedPorts, resolveConfig } from '../../src/config.js';
import { chooseUnitPorts } from '../../src/roles/agent/ports.js';
import { sampleAssignment } from '../harness/assignment.js';

// What a unit may not take of its machine: the ports the platform listens on, and root on the
// host's network.

t.test('a process lists every port its roles listen on, a gateway\'s internal and HTTPS listeners too', async (t) => {
  t.same(listenedPorts(resolveConfig({ role: 'agent,gateway' }, {})), [8080, 8081, 8443, 9003]);
  t.same(listenedPorts(resolveConfig({ role: 'gateway', port: '8090', httpsPort: '8490' }, {})), [8090, 8091, 8490]);
  t.same(listenedPorts(resolveConfig({ role: 'agent', port: '9103' }, {})), [9103]);
});

t.test('units on host networking run as nobody unless the operator names another numeric user', async (t) => {
  t.equal(resolveConfig({}, {}).agent.hostNetworkUser, '65534:65534');
  t.equal(resolveConfig({ hostNetworkUser: '1000:1000' }, {}).agent.hostNetworkUser, '1000:1000');
  t.equal(resolveConfig({}, { PLATFORM_HOST_NETWORK_USER: '0:0' }).agent.hostNetworkUser, '0:0');
  t.throws(() => resolveConfig({ hostNetworkUser: 'root' }, {}), new ConfigError('--host-network-user must be a numeric uid or uid:gid (e.g. 65534:65534), got root'));
});

t.test('the host-network port picker never picks a platform port', async (t) => {
  // With every port the platform's, the picker must give up rather than hand one out.
  const everyPort = Array.from({ length: 65535 }, (_, i) => i + 1);
  await t.rejects(chooseUnitPorts(sampleAssignment({ ports: [] }), 'host', new Set(), everyPort), /could not find a free host port/);
  const picked = await chooseUnitPorts(sampleAssignment({ ports: [] }), 'host', new Set(), []);
  t.ok(picked.port > 0, `with none, a free port: ${picked.port}`);
});
