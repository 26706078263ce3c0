import t from 'tap';
import { readFileSync } from 'node:fs';
import { CertificateRefused, checkCertificate } from '../../src/certificates/certificate-check.js';
import { makeServerCertificate } from '../harness/tls-certificates.js';

// What an operator's certificate must satisfy before any gateway serves it: its key, its dates,
// its names. Certificates are made by openssl; the clock is an argument.

const dir = t.testdir();
const read = (path: string) => readFileSync(path, 'utf8');
const one = makeServerCertificate(dir, 'one', ['a.example.test']);
const other = makeServerCertificate(dir, 'other', ['a.example.test']);
const wildcard = makeServerCertificate(dir, 'wild', ['*.example.test']);
const expired = makeServerCertificate(dir, 'old', ['a.example.test'], { expired: true });
const now = Date.now();

const refusal = (host: string, cert: string, key: string, at = now): string => {
  try {
    checkCertificate(host, read(cert), read(key), 'operator', at);
  } catch (error) {
    if (error instanceof CertificateRefused) return error.message;
    throw error;
  }
  return 'accepted';
};

t.test('a certificate with its key, unexpired and naming the host is accepted and described', async (t) => {
  const listing = checkCertificate('a.example.test', `${read(one.cert)}${read(one.ca)}`, read(one.key), 'operator', now);
  t.equal(listing.host, 'a.example.test');
  t.same(listing.names, ['a.example.test']);
  t.match(listing.issuer, /CN=one-ca/);
  t.equal(listing.source, 'operator');
  t.ok(Date.parse(listing.notAfter) > now);
  t.match(listing.fingerprint, /^([0-9A-F]{2}:){31}[0-9A-F]{2}$/);
  t.notOk(JSON.stringify(listing).includes('PRIVATE KEY'), 'the listing holds no key');
});

t.test('a key that is not the certificate\'s is refused naming the key', async (t) => {
  t.equal(refusal('a.example.test', one.cert, other.key), 'key: does not match the certificate (the first certificate of the chain)');
});

t.test('an expired certificate is refused with its end date', async (t) => {
  t.match(refusal('a.example.test', expired.cert, expired.key), /^certificate: expired on \d{4}-/);
  t.match(refusal('a.example.test', one.cert, one.key, now + 3 * 86_400_000), /^certificate: expired on/);
});

t.test('a certificate not covering the host is refused naming its names', async (t) => {
  t.equal(refusal('b.example.test', one.cert, one.key), 'certificate: does not cover b.example.test (its names: a.example.test)');
  t.equal(refusal('*.example.test', one.cert, one.key), 'certificate: does not cover *.example.test (its names: a.example.test)');
  t.equal(refusal('a.b.example.test', wildcard.cert, wildcard.key), 'certificate: does not cover a.b.example.test (its names: *.example.test)', 'a wildcard covers one label');
});

t.test('a wildcard certificate covers its wildcard host and the names one label under it', async (t) => {
  t.equal(refusal('*.example.test', wildcard.cert, wildcard.key), 'accepted');
  t.equal(refusal('web.example.test', wildcard.cert, wildcard.key), 'accepted');
});

t.test('text that is no certificate or no key is refused without quoting it', async (t) => {
  t.equal(refusal('a.example.test', one.key, one.key), 'certificate: not a PEM certificate (-----BEGIN CERTIFICATE-----)');
  t.throws(() => checkCertificate('a.example.test', read(one.cert), 'secret-looking junk', 'operator', now), new CertificateRefused('key: not an unencrypted PEM private key'));
});
