import { X509Certificate, createPrivateKey, type KeyObject } from 'node:crypto';
import type { Certificate, CertificateSource } from '../schemas/certificate.js';

// Whether a certificate chain and key may serve a host, checked with node:crypto before anything
// is stored: the key must be the certificate's, the certificate unexpired, and its names must
// cover the host. Pure (the time is an argument), so every refusal has a unit test.

/** A refusal naming the field and the rule, for a 400. Never quotes the key. */
export class CertificateRefused extends Error {}

const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/** The PEM certificates of a chain, leaf first. */
export function splitChain(chain: string): string[] {
  return chain.match(PEM_CERTIFICATE) ?? [];
}

function parseChain(chain: string): X509Certificate[] {
  const blocks = splitChain(chain);
  if (blocks.length === 0) throw new CertificateRefused('certificate: not a PEM certificate (-----BEGIN CERTIFICATE-----)');
  return blocks.map((block, index) => {
    try {
      return new X509Certificate(block);
    } catch {
      throw new CertificateRefused(`certificate: PEM block ${index + 1} is not a valid X.509 certificate`);
    }
  });
}

function parseKey(pem: string): KeyObject {
  try {
    return createPrivateKey({ key: pem, format: 'pem' });
  } catch {
    // The parser's message could quote the input: say only what is wrong.
    throw new CertificateRefused('key: not an unencrypted PEM private key');
  }
}

/** The DNS names of a certificate's subjectAltName, lower case. */
export function dnsNames(certificate: X509Certificate): string[] {
  return (certificate.subjectAltName ?? '')
    .split(', ')
    .filter((entry) => entry.startsWith('DNS:'))
    .map((entry) => entry.slice(4).toLowerCase());
}

/**
 * Whether the certificate covers `host`. A wildcard host needs the same wildcard among the
 * names; a plain host may be covered by a wildcard one label up (RFC 6125 §6.4.3, as
 * `checkHost` matches).
 */
export function covers(certificate: X509Certificate, host: string): boolean {
  if (host.startsWith('*.')) return dnsNames(certificate).includes(host);
  return certificate.checkHost(host, { subject: 'never', wildcards: true, partialWildcards: false, multiLabelWildcards: false }) !== undefined;
}

const isoDate = (text: string): string => new Date(text).toISOString();

/** SHA-256 of the leaf, as `openssl x509 -fingerprint -sha256` prints it. */
export const fingerprintOf = (certificate: X509Certificate): string => certificate.fingerprint256;

/** What a listing says of a chain already checked. */
export function describeChain(host: string, chain: string, source: CertificateSource, now: number): Certificate {
  const leaf = new X509Certificate(splitChain(chain)[0]!);
  return {
    host,
    source,
    names: dnsNames(leaf),
    issuer: leaf.issuer.replaceAll('\n', ', '),
    notBefore: isoDate(leaf.validFrom),
    notAfter: isoDate(leaf.validTo),
    fingerprint: fingerprintOf(leaf),
    updatedAt: new Date(now).toISOString(),
  };
}

/**
 * Checks the chain and key for `host` and returns the listing of the certificate. Throws
 * CertificateRefused naming which rule failed: the key, the expiry, or the names.
 */
export function checkCertificate(host: string, chain: string, keyPem: string, source: CertificateSource, now: number): Certificate {
  const [leaf] = parseChain(chain);
  const key = parseKey(keyPem);
  if (key.type !== 'private' || !leaf!.checkPrivateKey(key)) throw new CertificateRefused('key: does not match the certificate (the first certificate of the chain)');
  const notAfter = Date.parse(leaf!.validTo);
  if (notAfter <= now) throw new CertificateRefused(`certificate: expired on ${isoDate(leaf!.validTo)}`);
  if (!covers(leaf!, host)) {
    const names = dnsNames(leaf!);
    throw new CertificateRefused(`certificate: does not cover ${host} (its names: ${names.length > 0 ? names.join(', ') : 'none'})`);
  }
  return describeChain(host, chain, source, now);
}
