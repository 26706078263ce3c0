import t from 'tap';
import { FIRST_RETRY_MS, MAX_RETRY_MS, orderDueAt, renewAt, retryDelayMs } from '../../src/certificates/acme/renewal-policy.js';
import type { CertificateEntry } from '../../src/certificates/certificate-set.js';

// When a gateway orders a host's certificate from ACME.

const day = 86_400_000;
const entry = (source: 'acme' | 'operator', notBefore: number, notAfter: number): CertificateEntry => ({
  host: 'shop.example.test',
  chain: '',
  key: '',
  notBefore,
  notAfter,
  source,
  fingerprint: 'F',
});

t.test('a host without a certificate is due at once', async (t) => {
  t.equal(orderDueAt(undefined, undefined), 0);
});

t.test('an ACME certificate is renewed at two thirds of its lifetime', async (t) => {
  t.equal(renewAt({ notBefore: 0, notAfter: 90 * day }), 60 * day);
  t.equal(orderDueAt(entry('acme', 1000, 1000 + 90 * day), undefined), 1000 + 60 * day);
});

t.test("an operator's certificate, its own or a wildcard, is never ordered over", async (t) => {
  t.equal(orderDueAt(entry('operator', 0, 1), undefined), Infinity);
});

t.test('after a failure the next attempt waits for the backoff, doubling to an hour', async (t) => {
  t.equal(retryDelayMs(1), FIRST_RETRY_MS);
  t.equal(retryDelayMs(2), 2 * FIRST_RETRY_MS);
  t.equal(retryDelayMs(3), 4 * FIRST_RETRY_MS);
  t.equal(retryDelayMs(40), MAX_RETRY_MS);
  const nextAttemptAt = new Date(5 * day).toISOString();
  const failed = { host: 'shop.example.test', state: 'failed' as const, failures: 1, error: 'x', nextAttemptAt, updatedAt: nextAttemptAt };
  t.equal(orderDueAt(undefined, failed), 5 * day, 'no certificate: at the next attempt');
  t.equal(orderDueAt(entry('acme', 0, 3 * day), failed), 5 * day, 'a failed renewal: at the next attempt, not at once');
  t.equal(orderDueAt(entry('acme', 0, 30 * day), { ...failed, state: 'issued' }), 20 * day, 'an issued status does not delay');
});
