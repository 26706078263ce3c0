import type { Store } from '../store/store.js';
import { acmeStatusKey, acmeStatusPrefix, certificateKey, certificatePrefix } from '../store/keys.js';
import { listRecords, readRecord, type Versioned } from '../store/json-records.js';
import type { AcmeStatus, Certificate, CertificateRecord } from '../schemas/certificate.js';

// Every write of a certificate record (the operator's routes and the ACME orderer both come
// here), and the listings people see, which drop the key. A record is the chain, its key and the
// listing's facts, at one key per host.

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

export interface CertificateListing {
  host: string;
  certificate?: Certificate;
  acme?: AcmeStatus;
}

/** Every host with a certificate or an ACME status, in host order; never a key. */
export async function listCertificates(store: Store): Promise<CertificateListing[]> {
  const [records, statuses] = await Promise.all([listRecords<CertificateRecord>(store, certificatePrefix), listRecords<AcmeStatus>(store, acmeStatusPrefix)]);
  const byHost = new Map<string, CertificateListing>();
  for (const record of records) byHost.set(record.host, { host: record.host, certificate: withoutKey(record) });
  for (const status of statuses) byHost.set(status.host, { ...(byHost.get(status.host) ?? { host: status.host }), acme: status });
  return [...byHost.values()].sort((a, b) => (a.host < b.host ? -1 : a.host > b.host ? 1 : 0));
}

/** The certificate serving `host` (its own, else the wildcard one label up) and the host's ACME status. */
export async function certificateFor(store: Store, host: string): Promise<{ certificate?: Certificate; acme?: AcmeStatus }> {
  const wildcard = `*.${host.slice(host.indexOf('.') + 1)}`;
  const [own, covering, status] = await Promise.all([readCertificate(store, host), readCertificate(store, wildcard), readRecord<AcmeStatus>(store, acmeStatusKey(host))]);
  const record = own?.record ?? covering?.record;
  return { ...(record ? { certificate: withoutKey(record) } : {}), ...(status ? { acme: status.record } : {}) };
}
