import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, resolveEtcd } from '../../src/config.js';

// `--etcd*` flags and `PLATFORM_ETCD*` variables → etcd URLs and security; mistakes are ConfigErrors
// that never quote the password.

const dir = mkdtempSync(join(tmpdir(), 'platform-etcd-flags-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const file = (name: string, content: string): string => {
  const path = join(dir, name);
  writeFileSync(path, content);
  return path;
};
const ca = file('ca.pem', 'CA PEM');
const cert = file('client.pem', 'CERT PEM');
const key = file('client.key', 'KEY PEM');
const url = 'https://127.0.0.1:2379';

t.test('files are read, the password file loses its final newline, and flags win over variables', async (t) => {
  const resolved = resolveEtcd(
    { etcd: `${url}, https://10.0.0.2:2379`, etcdCa: ca, etcdCert: cert, etcdKey: key, etcdUser: 'platform', etcdPasswordFile: file('password', 'from-file\n') },
    { PLATFORM_ETCD_USER: 'someone-else', PLATFORM_ETCD_PASSWORD: 'from-env' },
  );
  t.same(resolved.etcd, [url, 'https://10.0.0.2:2379']);
  t.equal(resolved.etcdSecurity.ca?.toString(), 'CA PEM');
  t.equal(resolved.etcdSecurity.cert?.toString(), 'CERT PEM');
  t.equal(resolved.etcdSecurity.key?.toString(), 'KEY PEM');
  t.same(resolved.etcdSecurity.user, { name: 'platform', password: 'from-file' });
});

t.test('everything can come from PLATFORM_ETCD_* variables; empty ones count as unset', async (t) => {
  const resolved = resolveEtcd({}, { PLATFORM_ETCD: url, PLATFORM_ETCD_CA: ca, PLATFORM_ETCD_CERT: '', PLATFORM_ETCD_USER: 'root', PLATFORM_ETCD_PASSWORD: 'secret' });
  t.same(resolved.etcd, [url]);
  t.notOk(resolved.etcdSecurity.cert);
  t.same(resolved.etcdSecurity.user, { name: 'root', password: 'secret' });
  t.same(resolveEtcd({}, {}), { etcdSecurity: {} }, 'no etcd at all: the embedded store');
});

t.test('mistakes are ConfigErrors naming the flag, never the password', async (t) => {
  const cases: [string, Parameters<typeof resolveEtcd>[0], NodeJS.ProcessEnv, RegExp][] = [
    ['a certificate without its key', { etcd: url, etcdCert: cert }, {}, /--etcd-cert and --etcd-key go together/],
    ['TLS material with an http:// URL', { etcd: 'http://127.0.0.1:2379', etcdCa: ca }, {}, /need https:\/\/ etcd URLs, got http:\/\/127.0.0.1:2379/],
    ['TLS material without etcd', { etcdCa: ca }, {}, /need --etcd/],
    ['an unreadable CA file', { etcd: url, etcdCa: join(dir, 'missing.pem') }, {}, /--etcd-ca: cannot read .*missing.pem/],
    ['a password without a user', { etcd: url }, { PLATFORM_ETCD_PASSWORD: 'hunter2' }, /an etcd password needs --etcd-user/],
    ['a user without a password', { etcd: url, etcdUser: 'root' }, {}, /--etcd-user needs a password/],
    ['both password flags', { etcd: url, etcdUser: 'root', etcdPassword: 'hunter2', etcdPasswordFile: file('p2', 'x') }, {}, /not both/],
    ['an empty password file', { etcd: url, etcdUser: 'root', etcdPasswordFile: file('p3', '\n') }, {}, /holds an empty password/],
  ];
  for (const [what, flags, env, message] of cases) {
    const error = (() => {
      try {
        resolveEtcd(flags, env);
      } catch (thrown) {
        return thrown;
      }
      return undefined;
    })();
    t.type(error, ConfigError, what);
    t.match((error as Error).message, message, what);
    t.notMatch((error as Error).message, 'hunter2', `${what}: the password is not quoted`);
  }
});
