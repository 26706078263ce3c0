import t from 'tap';
import { haproxyConfig, type HaproxyConfigInput } from '../../src/roles/gateway/haproxy-config.js';
import { certificateChanges, crtListFile, pemBundle, PLACEHOLDER_NAME, type CertificatePaths } from '../../src/roles/gateway/haproxy-certificates.js';

// HTTPS on the HAProxy data plane, its pure parts: the TLS bind and the rules around it in the
// configuration, the crt-list file, and the Runtime API commands for certificates coming, renewed
// and going (the integration test https.test.ts runs them against a real HAProxy).

const files = { runtimeSocket: '/s/runtime.sock', pidFile: '/s/haproxy.pid', hostsMap: '/s/hosts.map', unitsMap: '/s/units.map', errorsDir: '/s/errors', lua: '/s/c.lua' };
const settings = {
  threads: 2,
  requestTimeoutSeconds: 60,
  idleTimeoutSeconds: 60,
  headersTimeoutSeconds: 10,
  maxHeaderSize: 16384,
  maxConnections: 2048,
  maxConnectionsPerAddress: 256,
  upstreamConnections: 128,
};
const base: HaproxyConfigInput = { listeners: [{ host: '0.0.0.0', port: 8080, name: 'public' }], internalDomain: 'platform.internal', ownPort: 4000, settings, files, backends: [] };
const tls = { host: '0.0.0.0', port: 8443, crtList: '/s/certs.list', domain: 'example.test' };

t.test('with TLS: a strict-SNI bind on the HTTPS port with the crt-list, TLS 1.2+, HTTP/2 by ALPN; X-Forwarded-Proto by the connection', async (t) => {
  const config = haproxyConfig({ ...base, tls });
  t.match(config, /^ {2}bind 0\.0\.0\.0:8443 name https ssl crt-list \/s\/certs\.list strict-sni ssl-min-ver TLSv1\.2 alpn h2,http\/1\.1$/m);
  t.match(config, /^ {2}http-request set-header x-forwarded-proto https if routed \{ ssl_fc \}$/m);
  t.match(config, /^ {2}http-request set-header x-forwarded-proto http if routed !\{ ssl_fc \}$/m);
  t.notMatch(config, /strict-transport-security/, 'no HSTS unless asked for');
  const ipv6 = haproxyConfig({ ...base, tls: { ...tls, host: '::' } });
  t.match(ipv6, /^ {2}bind ipv6@:::8443 name https ssl /m);
  t.notMatch(haproxyConfig(base), /crt-list/, 'no TLS bind without --https-port');
});

t.test('HSTS over TLS for the public hosts only; the redirect to HTTPS is for plain requests only', async (t) => {
  const config = haproxyConfig({ ...base, tls: { ...tls, hstsMaxAgeSeconds: 600 }, httpsRedirectDomain: 'example.test' });
  t.match(config, /^ {2}http-response set-header strict-transport-security max-age=600 if \{ ssl_fc \} routed \{ var\(txn\.host\) -m reg \^\[\^\.\]\+\[\.\]example\[\.\]test\$ \}$/m);
  const pattern = new RegExp('^[^.]+[.]example[.]test$');
  t.ok(pattern.test('shop.example.test'));
  t.notOk(pattern.test('shop.internal.example.test'), 'an internal domain under the public one gets no HSTS');
  t.notOk(pattern.test('shop.example.testing'));
  t.match(config, /^ {2}http-request unset-var\(txn\.backend\) if !\{ ssl_fc \} \{ var\(txn\.host\) -m end \.example\.test \}$/m);
});

t.test('with an internal listener, the HTTPS bind counts as public', async (t) => {
  const config = haproxyConfig({ ...base, listeners: [...base.listeners, { host: '10.0.0.5', port: 81, name: 'internal' }], tls });
  t.match(config, /^ {2}acl public_listener so_name public https$/m);
});

const paths: CertificatePaths = { crtList: '/s/certs.list', placeholder: '/s/certs/placeholder.pem', fileOf: (host) => `/s/certs/${host}.pem` };

t.test('the crt-list: the placeholder first, then one line per served host filtered to that host', async (t) => {
  t.equal(crtListFile(new Map(), paths), `/s/certs/placeholder.pem ${PLACEHOLDER_NAME}\n`);
  t.equal(
    crtListFile(new Map([['b.example.test', 'f2'], ['a.example.test', 'f1']]), paths),
    `/s/certs/placeholder.pem ${PLACEHOLDER_NAME}\n/s/certs/a.example.test.pem a.example.test\n/s/certs/b.example.test.pem b.example.test\n`,
  );
});

t.test('a PEM bundle has no empty line (a Runtime API payload ends at one)', async (t) => {
  const bundle = pemBundle({ chain: '-----BEGIN CERTIFICATE-----\nA\n-----END CERTIFICATE-----\n\n-----BEGIN CERTIFICATE-----\nB\n-----END CERTIFICATE-----\r\n', key: '\n-----BEGIN PRIVATE KEY-----\nK\n-----END PRIVATE KEY-----\n' });
  t.notMatch(bundle, /\n\n/);
  t.notMatch(bundle, /\r/);
  t.match(bundle, /^-----BEGIN CERTIFICATE-----\nA\n.*K\n-----END PRIVATE KEY-----$/s);
});

t.test('certificate changes: new hosts are loaded and listed, renewals set and committed in place, gone hosts unlisted and freed', async (t) => {
  const pem = (host: string) => `PEM-${host}`;
  const live = new Map([['a.example.test', 'f1'], ['b.example.test', 'f2']]);
  const wanted = new Map([['a.example.test', 'f1'], ['b.example.test', 'f3'], ['c.example.test', 'f4']]);
  t.same(certificateChanges(live, live, paths, pem), [], 'nothing changed, no command');
  const changes = certificateChanges(live, wanted, paths, pem);
  t.same(changes, [
    { host: 'b.example.test', kind: 'update', commands: ['set ssl cert /s/certs/b.example.test.pem <<\nPEM-b.example.test\n', 'commit ssl cert /s/certs/b.example.test.pem'] },
    {
      host: 'c.example.test',
      kind: 'add',
      commands: [
        'new ssl cert /s/certs/c.example.test.pem',
        'set ssl cert /s/certs/c.example.test.pem <<\nPEM-c.example.test\n',
        'commit ssl cert /s/certs/c.example.test.pem',
        'add ssl crt-list /s/certs.list <<\n/s/certs/c.example.test.pem c.example.test\n',
      ],
    },
  ]);
  const removed = certificateChanges(wanted, new Map([['c.example.test', 'f4']]), paths, pem);
  t.same(removed.map(({ host, kind, commands }) => [host, kind, commands]), [
    ['a.example.test', 'remove', ['del ssl crt-list /s/certs.list /s/certs/a.example.test.pem', 'del ssl cert /s/certs/a.example.test.pem']],
    ['b.example.test', 'remove', ['del ssl crt-list /s/certs.list /s/certs/b.example.test.pem', 'del ssl cert /s/certs/b.example.test.pem']],
  ]);
});
