import t from 'tap';
import { ConfigError, LETS_ENCRYPT_DIRECTORY, resolveConfig } from '../../src/config.js';

// The gateway's HTTPS flags → its TLS settings: the listener is on by default, ACME is turned on
// by its contact, and combinations that cannot work are refused before anything starts.

const tlsOf = (flags: Record<string, unknown>, env: NodeJS.ProcessEnv = {}) => resolveConfig({ role: 'gateway', ...flags }, env).gateway.tls;

t.test('the HTTPS listener is on at 8443 by default, off with --https-port off, and ACME off', async (t) => {
  t.same(tlsOf({}), { httpsPort: 8443, httpsRedirect: false, hstsMaxAgeSeconds: undefined, acme: undefined });
  t.equal(tlsOf({ httpsPort: 'off' }).httpsPort, undefined);
  t.equal(tlsOf({}, { PLATFORM_HTTPS_PORT: '443' }).httpsPort, 443);
});

t.test("--acme-email turns ACME on, with Let's Encrypt production unless --acme-directory names another", async (t) => {
  t.same(tlsOf({ acmeEmail: 'ops@example.com' }).acme, { email: 'ops@example.com', directoryUrl: LETS_ENCRYPT_DIRECTORY, caFile: undefined });
  t.equal(tlsOf({ acmeEmail: 'ops@example.com', acmeDirectory: 'https://acme.internal/dir' }).acme?.directoryUrl, 'https://acme.internal/dir');
});

t.test('settings that cannot work are refused naming the flag', async (t) => {
  t.throws(() => tlsOf({ acmeDirectory: 'https://acme.internal/dir' }), new ConfigError('--acme-directory and --acme-ca-file need --acme-email: ACME is turned on by naming its contact'));
  t.throws(() => tlsOf({ acmeEmail: 'ops@example.com', httpsPort: 'off' }), new ConfigError('--acme-email needs the HTTPS listener (--https-port is off)'));
  t.throws(() => tlsOf({ httpsRedirect: true, httpsPort: 'off' }), new ConfigError('--https-redirect needs the HTTPS listener (--https-port is off)'));
  t.throws(() => tlsOf({ acmeEmail: 'not an address' }), { message: '--acme-email must be an email address, got not an address' });
  t.throws(() => tlsOf({ httpsPort: '70000' }), { message: '--https-port must be an integer from 0 to 65535, got 70000' });
});
