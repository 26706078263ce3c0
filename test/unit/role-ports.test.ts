import t from 'tap';
import { ConfigError, listenedPorts, portOf, resolveConfig } from '../../src/config.js';

// `platform up` moves its roles off their default ports with --ports role=port,… (issue 31: before,
// `--port needs a single --role` and nothing else moved them).

const env = {};

t.test('--ports moves the roles it names; the others keep their defaults; the gateway internal listener follows the gateway', async (t) => {
  const config = resolveConfig({ ports: 'orchestrator=9100, gateway=8088' }, env);
  t.equal(portOf(config, 'orchestrator'), 9100);
  t.equal(portOf(config, 'gateway'), 8088);
  t.equal(portOf(config, 'directory'), 9001);
  t.ok(listenedPorts(config).includes(8089), 'the internal listener on the gateway port + 1');
  t.equal(portOf(resolveConfig({}, { PLATFORM_PORTS: 'web=9204' }), 'web'), 9204, 'env PLATFORM_PORTS');
});

t.test('bad --ports are refused naming the pair and the rule', async (t) => {
  t.throws(() => resolveConfig({ ports: 'orchestrator:9100' }, env), new ConfigError('--ports takes role=port pairs, comma-separated (e.g. orchestrator=9100,gateway=8088), got orchestrator:9100'));
  t.throws(() => resolveConfig({ ports: 'builder=9100' }, env), /^--ports: unknown role builder/);
  t.throws(() => resolveConfig({ role: 'directory', ports: 'gateway=8088' }, env), new ConfigError('--ports names gateway, which this process does not run (it runs directory)'));
  t.throws(() => resolveConfig({ ports: 'web=70000' }, env), /^--ports web must be an integer from 1 to 65535, got 70000/);
  t.throws(() => resolveConfig({ ports: 'web=9000' }, env), new ConfigError('--ports: orchestrator and web would both listen on port 9000'));
  t.throws(() => resolveConfig({ port: '9100' }, env), /--port needs a single --role; to move several roles, name each: --ports orchestrator=9100,gateway=8088/);
});
