import type { Operation, Store } from '../store.js';
import { releaseKey, releasePrefix } from '../keys.js';
import { deleteKeys, listRecords, readRecord } from '../json-records.js';
import { undeclared } from './services.js';
import type { Release } from '../../schemas/release.js';

// The one owner of /platform/releases/: immutable, numbered per service, each made for one
// declaration of the service (its uuid), written by the leading scheduler. A service deleted and
// declared again under the same name starts a history of its own: the predecessor's releases are
// out of reach here and deleted by housekeeping.

/** A declaration's identity, as releases are filtered by it. */
export interface Declared {
  name: string;
  uuid: string;
}

// Releases written before releases carried a uuid belong to whoever holds the name.
const belongsTo = (service: Declared) => (release: Release): boolean => release.serviceUuid === undefined || release.serviceUuid === service.uuid;

export const listReleases = async (store: Store, service: Declared): Promise<Release[]> =>
  (await listRecords<Release>(store, releasePrefix(service.name))).filter(belongsTo(service));

/** A release by number; `service` may be just a name where the caller follows a deployment record it trusts. */
export async function getRelease(store: Store, service: Declared | string, version: number): Promise<Release | undefined> {
  const release = (await readRecord<Release>(store, releaseKey(typeof service === 'string' ? service : service.name, version)))?.record;
  return release && (typeof service === 'string' || belongsTo(service)(release)) ? release : undefined;
}

/**
 * This declaration's releases, after deleting those a deleted predecessor of the name left
 * (housekeeping deletes them too, but a declaration made again at once can come first), so the
 * new history starts at v1 and never mixes with the old one.
 */
export async function claimReleases(store: Store, service: Declared): Promise<Release[]> {
  const all = await listRecords<Release>(store, releasePrefix(service.name));
  const foreign = all.filter((release) => !belongsTo(service)(release));
  if (foreign.length > 0) await store.txn([], foreign.map((release) => ({ op: 'delete' as const, key: releaseKey(service.name, release.version) })));
  return all.filter(belongsTo(service));
}

/**
 * Writes the release under the next free version; create-if-absent makes concurrent writers take
 * turns. `known` (the service's releases the caller has just read) saves the first listing;
 * `alongside` gives writes that go in the same transaction (the release's deployment record).
 * Returns the release and the transaction's revision.
 */
export async function createRelease(
  store: Store,
  draft: Omit<Release, 'version' | 'createdAt'>,
  known?: Release[],
  alongside: (release: Release) => Operation[] = () => [],
): Promise<{ release: Release; revision: number }> {
  let versions = known?.map((release) => release.version);
  for (;;) {
    versions ??= (await listRecords<Release>(store, releasePrefix(draft.service))).map((release) => release.version);
    const version = Math.max(0, ...versions) + 1;
    const release: Release = { ...draft, version, createdAt: new Date().toISOString() };
    const key = releaseKey(draft.service, version);
    const created = await store.txn([{ key, target: 'createRevision', equals: 0 }], [{ op: 'put', key, value: JSON.stringify(release) }, ...alongside(release)]);
    if (created.succeeded) return { release, revision: created.revision };
    versions = undefined;
  }
}

/** Deletes every release of `name` while no service of that name is declared; false when one is (declared again since). */
export async function deleteUndeclaredReleases(store: Store, name: string): Promise<boolean> {
  return (await store.txn([undeclared(name)], [{ op: 'deletePrefix', prefix: releasePrefix(name) }])).succeeded;
}

export const deleteReleases = (store: Store, name: string, versions: readonly number[]): Promise<void> =>
  deleteKeys(store, versions.map((version) => releaseKey(name, version)));
