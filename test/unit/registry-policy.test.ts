import t from 'tap';
import { RegistryAllowList, checkedLookup, refusalOf, specialKind } from '../../src/http/registry-policy.js';
import { ConfigError, resolveConfig } from '../../src/config.js';

// Which registry addresses the scheduler may contact, and how --allowed-registry is read.

t.test('special addresses are classified; public ones are not', async (t) => {
  const cases: [string, string | undefined][] = [
    ['127.0.0.1', 'loopback'],
    ['127.255.0.9', 'loopback'],
    ['::1', 'loopback'],
    ['::ffff:127.0.0.1', 'loopback'],
    ['::ffff:7f00:1', 'loopback'],
    ['10.1.2.3', 'private'],
    ['172.16.0.1', 'private'],
    ['172.31.255.255', 'private'],
    ['192.168.1.1', 'private'],
    ['100.64.0.1', 'shared (CGNAT)'],
    ['100.127.255.254', 'shared (CGNAT)'],
    ['169.254.169.254', 'link-local'],
    ['fe80::1', 'link-local'],
    ['fd00::1', 'private (ULA)'],
    ['fc00::1', 'private (ULA)'],
    ['0.0.0.0', 'unspecified'],
    ['::', 'unspecified'],
    ['224.0.0.1', 'multicast'],
    ['8.8.8.8', undefined],
    ['172.32.0.1', undefined],
    ['100.128.0.1', undefined],
    ['::ffff:8.8.8.8', undefined],
    ['2606:4700::1111', undefined],
  ];
  for (const [address, kind] of cases) t.equal(specialKind(address), kind, address);
});

t.test('the allow list names hosts (with or without a port) and covers addresses and ranges', async (t) => {
  const allowed = new RegistryAllowList(['registry.internal', 'localhost:5000', '127.0.0.1', '[::1]:5001', '10.0.0.0/8', 'FD00::/8']);
  t.ok(allowed.names('registry.internal', 443));
  t.ok(allowed.names('REGISTRY.internal', 5000), 'any port, any case');
  t.ok(allowed.names('localhost', 5000));
  t.notOk(allowed.names('localhost', 5001), 'only the named port');
  t.ok(allowed.names('[::1]', 5001), 'IPv6 as URL.hostname spells it');
  t.notOk(allowed.names('[::1]', 5002));
  t.ok(allowed.covers('127.0.0.1'), 'an address without a port covers names resolving to it');
  t.notOk(allowed.covers('127.0.0.2'));
  t.notOk(allowed.covers('::1'), 'an address with a port covers only itself');
  t.ok(allowed.covers('10.200.3.4'));
  t.ok(allowed.covers('fd12::1'));
  t.equal(refusalOf('10.200.3.4', allowed), undefined);
  t.equal(refusalOf('192.168.0.1', allowed), '192.168.0.1 is a private address');
  t.equal(refusalOf('1.1.1.1', new RegistryAllowList([])), undefined, 'public addresses need no entry');
});

t.test('a host name connects only to the allowed addresses it resolves to', async (t) => {
  const resolve = (allowed: RegistryAllowList, name: string) =>
    new Promise<{ error: Error | null; addresses: unknown }>((done) => checkedLookup(allowed)(name, { all: true }, (error, addresses) => done({ error, addresses })));
  const refused = await resolve(new RegistryAllowList([]), 'localhost');
  t.match(refused.error, { name: 'RegistryRefused', message: /^localhost resolves only to addresses not allowed: .*\(loopback\)/ });
  const allowed = await resolve(new RegistryAllowList(['127.0.0.0/8', '::1']), 'localhost');
  t.equal(allowed.error, null);
  t.ok((allowed.addresses as { address: string }[]).length > 0);
});

t.test('--allowed-registry and PLATFORM_ALLOWED_REGISTRIES', async (t) => {
  const config = (flags: string[] | undefined, env: NodeJS.ProcessEnv = {}) => resolveConfig({ role: 'scheduler', allowedRegistry: flags }, env).scheduler.allowedRegistries;
  t.same(config(undefined), [], 'none by default');
  t.same(config(['127.0.0.1:5000', 'a.internal,10.0.0.0/8']), ['127.0.0.1:5000', 'a.internal', '10.0.0.0/8'], 'repeated or comma-separated');
  t.same(config(undefined, { PLATFORM_ALLOWED_REGISTRIES: ' 127.0.0.1 , b.internal:443' }), ['127.0.0.1', 'b.internal:443']);
  t.same(config(['c.internal'], { PLATFORM_ALLOWED_REGISTRIES: '127.0.0.1' }), ['c.internal'], 'the flag wins over the variable');
  for (const bad of ['http://x.internal', 'x.internal:99999', '10.0.0.0/33', 'x_y', 'a.internal/8']) {
    t.throws(() => config([bad]), new ConfigError(`--allowed-registry takes host, host:port, [IPv6]:port or an address range such as 10.0.0.0/8, got ${bad}`), bad);
  }
});
