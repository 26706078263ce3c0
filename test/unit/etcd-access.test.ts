import t from 'tap';
import { EtcdAuthenticationFailedError, EtcdPermissionDeniedError, GRPCInvalidArgumentError, GRPCUnavailableError } from 'etcd3';
import { classifyTlsFailure, etcdWaitPauseMs, EtcdAccessError, ETCD_WAIT_MAX_PAUSE_MS, loginRefusal } from '../../src/store/etcd-access.js';
import { waitForEtcd } from '../../src/store/open-store.js';
import type { Store } from '../../src/store/store.js';

// Issue 30: what a role's start waits for and what ends it. An etcd out of reach (down, no quorum
// yet: every machine rebooted) heals by waiting; a refused certificate, CA or login never does.

const errno = (code: string, message = code): NodeJS.ErrnoException => Object.assign(new Error(message), { code });

t.test('a TLS failure of a server out of reach is waited for; one of a refusal is not', async (t) => {
  for (const code of ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN']) {
    t.same(classifyTlsFailure(errno(code, `connect ${code} 10.0.0.2:2379`), {}), { reachable: false, cause: `connect ${code} 10.0.0.2:2379` }, `${code}: unreachable`);
  }
  t.match(classifyTlsFailure(errno('UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'unable to verify the first certificate'), { ca: Buffer.from('ca') }), {
    refused: "etcd's certificate is not trusted (unable to verify the first certificate); is --etcd-ca the CA that signed etcd's certificate?",
  });
  t.match(classifyTlsFailure(errno('DEPTH_ZERO_SELF_SIGNED_CERT', 'self-signed certificate'), {}), { refused: /give the CA that signed etcd's certificate with --etcd-ca/ });
  t.match(classifyTlsFailure(errno('ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED'), {}), { refused: 'etcd asks for a client certificate (TLS alert "certificate required"); give --etcd-cert and --etcd-key' });
  t.match(classifyTlsFailure(errno('ERR_SSL_SSLV3_ALERT_BAD_CERTIFICATE'), { cert: Buffer.from('c'), key: Buffer.from('k') }), { refused: /^etcd rejected the client certificate \(TLS alert "bad certificate"\)/ });
  t.match(classifyTlsFailure(errno('ERR_SSL_WRONG_VERSION_NUMBER', 'wrong version number'), {}), { refused: /does not speak TLS on this port/ });
});

t.test('a refused login is named; a call that is only unavailable is no refusal', async (t) => {
  const user = { user: { name: 'root', password: 'secret-horse' } };
  t.equal(loginRefusal(new EtcdAuthenticationFailedError('authentication failed'), user), 'authentication failed for user "root": wrong user name or password');
  t.match(loginRefusal(new EtcdPermissionDeniedError('permission denied'), user), /^permission denied: user "root" may not read \/platform\//);
  t.match(loginRefusal(new EtcdPermissionDeniedError('permission denied'), {}), /give --etcd-user/);
  t.match(loginRefusal(new GRPCInvalidArgumentError('user name is empty'), {}), /without --etcd-user\?$/);
  t.equal(loginRefusal(new GRPCUnavailableError('no connection'), user), undefined, 'unavailable: waited for');
  t.equal(loginRefusal(new Error('deadline exceeded'), user), undefined, 'a missed deadline: waited for');
  t.notMatch(String(loginRefusal(new EtcdAuthenticationFailedError('x'), user)), 'secret-horse', 'never the password');
});

t.test('the pauses between looks double from 250 ms and stop growing at 5 s', async (t) => {
  t.same([1, 2, 3, 4, 5, 6, 7, 50].map(etcdWaitPauseMs), [250, 500, 1000, 2000, 4000, 5000, 5000, 5000]);
  t.equal(ETCD_WAIT_MAX_PAUSE_MS, 5000);
});

/** A store whose ping fails with each of `failures` in turn, then answers. */
function storeFailing(failures: unknown[]): Store & { pings: number } {
  const store = {
    pings: 0,
    ping: async () => {
      const failure = failures[store.pings++];
      if (failure !== undefined) throw failure;
    },
  };
  return store as unknown as Store & { pings: number };
}
const urls = ['http://10.0.0.1:2379'];

t.test('an etcd with no quorum yet is looked at again until it answers, each look logged', async (t) => {
  const store = storeFailing([new GRPCUnavailableError('no leader'), new Error('deadline exceeded')]);
  const warnings: string[] = [];
  await waitForEtcd(store, urls, {}, { dataDir: '', waitForEtcdMs: 10_000, warn: (message) => warnings.push(message) });
  t.equal(store.pings, 3, 'answered at the third look');
  t.match(warnings[0], /^etcd at http:\/\/10\.0\.0\.1:2379: unreachable \(.*no leader\); waiting for it \(0\.\d s so far, at most 10\.0 s\), next look in 0\.3 s$/);
  t.match(warnings[1], /unreachable \(deadline exceeded\); waiting for it .* next look in 0\.5 s$/);
  t.match(warnings[2], /^etcd at http:\/\/10\.0\.0\.1:2379: answers after 0\.\d s of waiting$/);
});

t.test('a refused login ends the wait at the first look', async (t) => {
  const store = storeFailing([new EtcdAuthenticationFailedError('authentication failed'), undefined]);
  const started = Date.now();
  await t.rejects(waitForEtcd(store, urls, { user: { name: 'root', password: 'p' } }, { dataDir: '', waitForEtcdMs: 60_000 }), new EtcdAccessError('etcd at http://10.0.0.1:2379: authentication failed for user "root": wrong user name or password'));
  t.equal(store.pings, 1, 'no second look');
  t.ok(Date.now() - started < 1000, 'at once');
});

t.test('the wait is bounded: past it the store is returned and the last look says so', async (t) => {
  const store = storeFailing(Array.from({ length: 100 }, () => new Error('deadline exceeded')));
  const warnings: string[] = [];
  await waitForEtcd(store, urls, {}, { dataDir: '', waitForEtcdMs: 600, warn: (message) => warnings.push(message) });
  t.ok(store.pings >= 2 && store.pings <= 4, `${store.pings} looks in 0.6 s`);
  t.match(warnings.at(-1), /unreachable \(deadline exceeded\); gave up waiting after 0\.\d s$/);
});

t.test('without a wait (the CLI, sidekicks) one look, as before', async (t) => {
  const store = storeFailing([new Error('deadline exceeded')]);
  const warnings: string[] = [];
  await waitForEtcd(store, urls, {}, { dataDir: '', warn: (message) => warnings.push(message) });
  t.equal(store.pings, 1);
  t.same(warnings, ['etcd at http://10.0.0.1:2379: unreachable (deadline exceeded)']);
});

t.test('a stop signal ends the wait', async (t) => {
  const store = storeFailing(Array.from({ length: 100 }, () => new Error('deadline exceeded')));
  const stopping = new AbortController();
  setTimeout(() => stopping.abort(new Error('stopped by SIGINT')), 100);
  await t.rejects(waitForEtcd(store, urls, {}, { dataDir: '', waitForEtcdMs: 60_000, signal: stopping.signal }), /stopped by SIGINT/);
});
