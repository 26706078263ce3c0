import t from 'tap';
import { networkInterfaces } from 'node:os';
import { HostRule, parseAllowedHosts } from '../../src/http/host-rule.js';
import { ConfigError, resolveConfig } from '../../src/config.js';
import { resolvedTarget } from '../../src/roles/web/orchestrator-proxy.js';

// The DNS-rebinding rule's names (src/http/host-rule.ts) and the dashboard proxy's path
// resolution: pure parts, without a server.

const domains = { domain: 'platform.local', internalDomain: 'platform.internal' };
const fail = (message: string) => new ConfigError(message);
const rule = (listenHost: string, allowed = '', advertiseHost = listenHost) =>
  new HostRule({ listenHost, advertiseHost, allowed: parseAllowedHosts(allowed, fail), domains });

t.test('a loopback listener answers its own address and localhost, with or without a port, and nothing else', async (t) => {
  const local = rule('127.0.0.1');
  for (const host of ['127.0.0.1', '127.0.0.1:9000', 'localhost', 'LOCALHOST:9000', 'localhost.', '[::1]', '[::1]:9000', undefined, '']) {
    t.ok(local.allows(host), `${host} is allowed`);
  }
  for (const host of ['attacker.example:9000', 'attacker.example', '127.0.0.1.attacker.example', 'localhost.attacker.example', '10.0.0.5', '[::2]']) {
    t.notOk(local.allows(host), `${host} is refused`);
  }
});

t.test('the advertise address, the component names the gateway routes and --allowed-host names count', async (t) => {
  const named = rule('127.0.0.1', 'ops.example.com, .corp.example, 10.0.0.9, ::2', 'node1.internal');
  for (const host of ['node1.internal:9000', 'orchestrator.platform.local', 'web.platform.internal', 'scheduler.platform.internal', 'ops.example.com:443', 'corp.example', 'a.b.corp.example', '10.0.0.9', '[::2]:9000']) {
    t.ok(named.allows(host), `${host} is allowed`);
  }
  for (const host of ['www.example.com', 'xcorp.example', 'corp.example.attacker.example', 'mysvc.platform.local']) t.notOk(named.allows(host), `${host} is refused`);
  t.ok(rule('127.0.0.1', '*').allows('anything.example'), '* turns the rule off');
});

t.test('a wildcard listener answers every address of the machine', async (t) => {
  const everywhere = rule('0.0.0.0', '', 'myhost');
  const addresses = Object.values(networkInterfaces()).flatMap((list) => list ?? []);
  const external = addresses.find((address) => address.family === 'IPv4' && !address.internal);
  if (external) t.ok(everywhere.allows(`${external.address}:9000`), `${external.address} (an interface address)`);
  t.ok(everywhere.allows('myhost:9000'), 'the advertised name');
  t.notOk(everywhere.allows('attacker.example:9000'));
  t.notOk(rule('127.0.0.1').allows(external?.address ?? '192.0.2.1'), 'a loopback listener does not answer the interface addresses');
});

t.test('--allowed-host entries are canonicalised; ports, paths and URLs are refused naming the flag', async (t) => {
  t.same(parseAllowedHosts(' Ops.Example.COM ,.Corp.Example., [::1], 2001:DB8::1,*', fail), ['ops.example.com', '.corp.example', '[::1]', '[2001:db8::1]', '*']);
  for (const entry of ['ops.example.com:9000', 'http://ops.example.com', 'a/b', 'user@host', 'a b', '.']) {
    t.throws(() => parseAllowedHosts(entry, fail), { message: new RegExp(`^--allowed-host takes host names or IP addresses without a port .*got ${entry.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}$`) }, entry);
  }
  t.same(resolveConfig({ allowedHost: 'a.example' }, { PLATFORM_ALLOWED_HOSTS: 'b.example' }).allowedHosts, ['a.example'], 'the flag wins');
  t.same(resolveConfig({}, { PLATFORM_ALLOWED_HOSTS: 'b.example,c.example' }).allowedHosts, ['b.example', 'c.example']);
  t.same(resolveConfig({}, {}).allowedHosts, []);
});

t.test('the dashboard proxy resolves dot segments, encoded ones too, before matching; what does not resolve is refused', async (t) => {
  t.same(resolvedTarget('/services/../metrics'), { path: '/metrics', query: '' });
  t.same(resolvedTarget('/services/%2e%2E/metrics?x=1'), { path: '/metrics', query: '?x=1' });
  t.same(resolvedTarget('/services/./web/.%2e/api?a=../b'), { path: '/services/api', query: '?a=../b' });
  t.same(resolvedTarget('/services/web'), { path: '/services/web', query: '' });
  for (const target of ['/services/../../metrics', '/services/..%2fmetrics', '/services/..%5Cmetrics', '/services\\..\\metrics', '/services/%zz', '/services/%00']) {
    t.match(resolvedTarget(target), { refused: /./ }, target);
  }
});
