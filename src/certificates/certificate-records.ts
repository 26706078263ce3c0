import type { Store } from '../store/store.js';
import { acmeLockKey, acmeLockPrefix, acmeStatusKey, acmeStatusPrefix, certificateKey, certificatePrefix, components, lastSegment } from '../store/keys.js';
import { decode, listRecords, readRecord, type Versioned } from '../store/json-records.js';
import type { CachedValue, PrefixCache } from '../store/prefix-cache.js';
import type { AcmeStatus, Certificate, CertificateRecord, CertificateSource } from '../schemas/certificate.js';
import { journalWrite } from '../store/records/journal.js';
import { undeclared } from '../store/records/services.js';
import { wildcardOf } from './certificate-set.js';

// Every write of a certificate record (the operator's routes, the ACME orderer and the scheduler's
// clean-up after a deleted service all come here), and the listings people see, which drop the
// key. A record is the chain, its key and the listing's facts, at one key per host.

/** The listing of a record: everything but the chain and the key. */
export function withoutKey(record: CertificateRecord): Certificate {
  const { chain: _chain, key: _key, ...listing } = record;
  return listing;
}

/** An operator's certificate replaces whatever the host had, from ACME or an operator. */
export async function putCertificate(store: Store, record: CertificateRecord): Promise<number> {
  return store.put(certificateKey(record.host), JSON.stringify(record));
}

/**
 * An ACME certificate is stored only if the host's record is still what the order started from
 * (`expectedModRevision`, 0: none): an operator's certificate stored meanwhile wins.
 */
export async function putOrderedCertificate(store: Store, record: CertificateRecord, expectedModRevision: number): Promise<boolean> {
  const key = certificateKey(record.host);
  const result = await store.txn(
    [expectedModRevision === 0 ? { key, target: 'createRevision', equals: 0 } : { key, target: 'modRevision', equals: expectedModRevision }],
    [{ op: 'put', key, value: JSON.stringify(record) }],
  );
  return result.succeeded;
}

/** Removes the host's certificate and its ACME status; false when it had no certificate. */
export async function removeCertificate(store: Store, host: string): Promise<boolean> {
  const result = await store.txn(
    [{ key: certificateKey(host), target: 'version', equals: 0 }],
    [],
    [
      { op: 'delete', key: certificateKey(host) },
      { op: 'delete', key: acmeStatusKey(host) },
    ],
  );
  return !result.succeeded;
}

export const readCertificate = (store: Store, host: string): Promise<Versioned<CertificateRecord> | undefined> =>
  readRecord<CertificateRecord>(store, certificateKey(host));

/** How ordering a host's certificate last went (written by the ordering gateway, src/certificates/acme/acme-orderer.ts). */
export const readAcmeStatus = (store: Store, host: string): Promise<Versioned<AcmeStatus> | undefined> => readRecord<AcmeStatus>(store, acmeStatusKey(host));

export const writeAcmeStatus = (store: Store, status: AcmeStatus): Promise<number> => store.put(acmeStatusKey(status.host), JSON.stringify(status));

/** A host's order status in a watched copy of the statuses. */
export const cachedAcmeStatus = (statuses: PrefixCache, host: string): CachedValue | undefined => statuses.get(acmeStatusKey(host));

/** Takes the host's order lock under the gateway's lease: false when another gateway holds it. */
export const takeOrderLock = (store: Store, host: string, owner: string, leaseId: string): Promise<boolean> => store.create(acmeLockKey(host), owner, { lease: leaseId });

export interface CertificateListing {
  host: string;
  certificate?: Certificate;
  acme?: AcmeStatus;
  /** The routed public hosts the certificate serves; none for an operator's certificate left by a deleted service. */
  serving: string[];
}

/**
 * Pure: the routed hosts a certificate stored for `host` serves, as gateways pick one (their own
 * certificate first, else the wildcard one label up).
 */
export function servingHosts(host: string, stored: ReadonlySet<string>, routed: readonly string[]): string[] {
  return routed.filter((name) => name === host || (!stored.has(name) && wildcardOf(name) === host));
}

/** Every host with a certificate or an ACME status, in host order, with the `routed` public hosts each certificate serves; never a key. */
export async function listCertificates(store: Store, routed: readonly string[]): Promise<CertificateListing[]> {
  const [records, statuses] = await Promise.all([listRecords<CertificateRecord>(store, certificatePrefix), listRecords<AcmeStatus>(store, acmeStatusPrefix)]);
  const stored = new Set(records.map((record) => record.host));
  const byHost = new Map<string, CertificateListing>();
  for (const record of records) byHost.set(record.host, { host: record.host, certificate: withoutKey(record), serving: servingHosts(record.host, stored, routed) });
  for (const status of statuses) byHost.set(status.host, { ...(byHost.get(status.host) ?? { host: status.host, serving: [] }), acme: status });
  return [...byHost.values()].sort((a, b) => (a.host < b.host ? -1 : a.host > b.host ? 1 : 0));
}

/** The certificate serving `host` (its own, else the wildcard one label up) and the host's ACME status. */
export async function certificateFor(store: Store, host: string): Promise<{ certificate?: Certificate; acme?: AcmeStatus }> {
  const wildcard = `*.${host.slice(host.indexOf('.') + 1)}`;
  const [own, covering, status] = await Promise.all([readCertificate(store, host), readCertificate(store, wildcard), readAcmeStatus(store, host)]);
  const record = own?.record ?? covering?.record;
  return { ...(record ? { certificate: withoutKey(record) } : {}), ...(status ? { acme: status.record } : {}) };
}

/** The service (or component) a public host `<name>.<domain>` is for: its first label. */
export const nameOfHost = (host: string): string => host.slice(0, host.indexOf('.'));

/** What the store holds for one host, as the clean-up after deleted services reads it. */
export interface HostCertificateState {
  host: string;
  certificate?: { source: CertificateSource; modRevision: number };
  /** An ACME status or order lock is stored for the host. */
  acmeState: boolean;
}

/** One host to clean: the ACME certificate (at the revision read) and the order state of a deleted service's host. */
export interface LeftBehind {
  host: string;
  service: string;
  /** The ACME certificate's revision; absent when only order state is left (or the certificate is an operator's). */
  certificateRevision?: number;
}

/**
 * Pure: what a deleted service left of HTTPS. ACME orders only `<service>.<domain>` and the
 * components' names, so a host whose first label is neither a declared service nor a component
 * was a deleted service's: its ACME certificate, status and lock go. An operator's certificate
 * stays (the operator added it, and a service declared again under the name is served with it);
 * `platform cert list` shows it serving no host meanwhile.
 */
export function leftByDeletedServices(states: readonly HostCertificateState[], declared: ReadonlySet<string>): LeftBehind[] {
  return states.flatMap((state) => {
    const service = nameOfHost(state.host);
    if (state.host.startsWith('*.') || declared.has(service) || (components as readonly string[]).includes(service)) return [];
    const ordered = state.certificate?.source === 'acme' ? { certificateRevision: state.certificate.modRevision } : {};
    return ordered.certificateRevision !== undefined || state.acmeState ? [{ host: state.host, service, ...ordered }] : [];
  });
}

/** Every host with a certificate, an ACME status or an order lock. */
export async function hostCertificateStates(store: Store): Promise<HostCertificateState[]> {
  const [certificates, statuses, locks] = await Promise.all([store.list(certificatePrefix), store.list(acmeStatusPrefix), store.list(acmeLockPrefix)]);
  const byHost = new Map<string, HostCertificateState>();
  for (const kv of certificates) {
    const host = lastSegment(kv.key);
    byHost.set(host, { host, certificate: { source: decode<CertificateRecord>(kv).source, modRevision: kv.modRevision }, acmeState: false });
  }
  for (const kv of [...statuses, ...locks]) {
    const host = lastSegment(kv.key);
    byHost.set(host, { ...(byHost.get(host) ?? { host }), acmeState: true });
  }
  return [...byHost.values()];
}

/**
 * Removes what a deleted service left (the ACME certificate, its status and order lock) and
 * journals a removed certificate, in one transaction that holds only while the service is still
 * not declared and the certificate is the one read: a declaration or an operator's certificate
 * made meanwhile keeps what it has. True when it was removed.
 */
export async function removeLeftBehind(store: Store, left: LeftBehind): Promise<boolean> {
  const { host, service, certificateRevision } = left;
  const certificate = certificateRevision === undefined ? [] : [{ key: certificateKey(host), target: 'modRevision' as const, equals: certificateRevision }];
  const journal =
    certificateRevision === undefined
      ? []
      : [journalWrite({ kind: 'certificate.removed', service, message: `certificate for ${host} (ACME) removed: service ${service} was deleted` })];
  const result = await store.txn(
    [undeclared(service), ...certificate],
    [...(certificateRevision === undefined ? [] : [{ op: 'delete' as const, key: certificateKey(host) }]), { op: 'delete', key: acmeStatusKey(host) }, { op: 'delete', key: acmeLockKey(host) }, ...journal],
  );
  return result.succeeded;
}
