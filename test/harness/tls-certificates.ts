// Certificates for a TLS etcd in tests, made by `openssl` (EC P-256 keys, valid one day): a CA,
// a server certificate for 127.0.0.1, a client certificate, and a second CA that signed nothing
// etcd trusts, for the "wrong CA" and "wrong client certificate" cases.

import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ensureCommand } from './system-packages.js';

export interface TlsCertificates {
  ca: string;
  serverCert: string;
  serverKey: string;
  /** Its common name is `platform-client`: no etcd user of that name exists. */
  clientCert: string;
  clientKey: string;
  /** A CA unrelated to the others, with its own self-signed certificate and key. */
  otherCa: string;
  otherCaKey: string;
}

function openssl(args: string[]): void {
  execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

const newKey = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

function selfSignedCa(dir: string, name: string): { cert: string; key: string } {
  const [cert, key] = [join(dir, `${name}.crt`), join(dir, `${name}.key`)];
  openssl(['req', '-x509', ...newKey, '-keyout', key, '-out', cert, '-days', '1', '-subj', `/CN=${name}`]);
  return { cert, key };
}

function signed(dir: string, name: string, ca: { cert: string; key: string }, extensions: string): { cert: string; key: string } {
  const [cert, key, request, extfile] = ['crt', 'key', 'csr', 'ext'].map((suffix) => join(dir, `${name}.${suffix}`)) as [string, string, string, string];
  openssl(['req', ...newKey, '-keyout', key, '-out', request, '-subj', `/CN=${name}`]);
  writeFileSync(extfile, extensions);
  openssl(['x509', '-req', '-in', request, '-CA', ca.cert, '-CAkey', ca.key, '-CAcreateserial', '-out', cert, '-days', '1', '-extfile', extfile]);
  return { cert, key };
}

/** Writes the certificates into `dir` (which the caller cleans up). */
export function makeTlsCertificates(dir: string): TlsCertificates {
  ensureCommand('openssl', 'openssl');
  const ca = selfSignedCa(dir, 'test-ca');
  const server = signed(dir, 'etcd-server', ca, 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n');
  const client = signed(dir, 'platform-client', ca, 'extendedKeyUsage=clientAuth\n');
  const other = selfSignedCa(dir, 'other-ca');
  return { ca: ca.cert, serverCert: server.cert, serverKey: server.key, clientCert: client.cert, clientKey: client.key, otherCa: other.cert, otherCaKey: other.key };
}

export interface ServerCertificate {
  cert: string;
  key: string;
  /** The CA that signed it, for clients to trust. */
  ca: string;
}

/**
 * A server certificate for `names` (DNS names, or IPv4 addresses) (a gateway's, say), signed by a new CA, valid one day; with
 * `expired`, a self-signed one whose end lies a day in the past (`x509 -days -1` re-signs only
 * self-signed certificates in openssl 3.0, which has no -not_after).
 */
export function makeServerCertificate(dir: string, name: string, names: string[], options: { expired?: boolean } = {}): ServerCertificate {
  ensureCommand('openssl', 'openssl');
  const subjectAltName = `subjectAltName=${names.map((name) => (/^[\d.]+$/.test(name) ? `IP:${name}` : `DNS:${name}`)).join(',')}`;
  if (options.expired) {
    const [cert, key] = [join(dir, `${name}.crt`), join(dir, `${name}.key`)];
    openssl(['req', '-x509', ...newKey, '-keyout', key, '-out', cert, '-days', '1', '-subj', `/CN=${name}`, '-addext', subjectAltName]);
    openssl(['x509', '-in', cert, '-key', key, '-days', '-1', '-out', cert]);
    return { cert, key, ca: cert };
  }
  const ca = selfSignedCa(dir, `${name}-ca`);
  const server = signed(dir, name, ca, `${subjectAltName}\nextendedKeyUsage=serverAuth\n`);
  return { cert: server.cert, key: server.key, ca: ca.cert };
}

export interface EtcdMemberCertificates {
  ca: string;
  /** For serving clients and peers: its SAN is the member's address, for server and client use (peers connect both ways). */
  memberCert: string;
  memberKey: string;
  /** The platform's client certificate (README "Securing etcd"). */
  clientCert: string;
  clientKey: string;
}

/** A CA, a member certificate for `address` and a client certificate, as README "Securing etcd" makes them (into `dir`). */
export function makeEtcdMemberCertificates(dir: string, address: string): EtcdMemberCertificates {
  ensureCommand('openssl', 'openssl');
  const ca = selfSignedCa(dir, 'etcd-ca');
  const member = signed(dir, 'member', ca, `subjectAltName=IP:${address}\nextendedKeyUsage=serverAuth,clientAuth\n`);
  const client = signed(dir, 'client', ca, 'extendedKeyUsage=clientAuth\n');
  return { ca: ca.cert, memberCert: member.cert, memberKey: member.key, clientCert: client.cert, clientKey: client.key };
}

export interface EtcdClusterCertificates {
  ca: string;
  /** One per address, in order: its SAN is that address, for server and client use. */
  members: { cert: string; key: string }[];
  clientCert: string;
  clientKey: string;
}

/** A CA, a member certificate for each address and one client certificate, as docs/install.md's step 2 makes them (into `dir`). */
export function makeEtcdClusterCertificates(dir: string, addresses: string[]): EtcdClusterCertificates {
  ensureCommand('openssl', 'openssl');
  const ca = selfSignedCa(dir, 'etcd-ca');
  const members = addresses.map((address, i) => signed(dir, `m${i + 1}`, ca, `subjectAltName=IP:${address}\nextendedKeyUsage=serverAuth,clientAuth\n`));
  const client = signed(dir, 'client', ca, 'extendedKeyUsage=clientAuth\n');
  return { ca: ca.cert, members, clientCert: client.cert, clientKey: client.key };
}
