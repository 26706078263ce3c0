import type { Store } from '../../store/store.js';
import { releaseKey, releasePrefix } from '../../store/keys.js';
import { listRecords, readRecord } from '../../store/json-records.js';
import type { Release } from '../../schemas/release.js';

export const listReleases = (store: Store, service: string): Promise<Release[]> => listRecords<Release>(store, releasePrefix(service));

export async function getRelease(store: Store, service: string, version: number): Promise<Release | undefined> {
  return (await readRecord<Release>(store, releaseKey(service, version)))?.record;
}

/** Writes the release under the next free version; create-if-absent makes concurrent writers take turns. */
export async function createRelease(store: Store, draft: Omit<Release, 'version' | 'createdAt'>): Promise<Release> {
  for (;;) {
    const releases = await store.list(releasePrefix(draft.service));
    const last = releases.at(-1);
    const version = last ? (JSON.parse(last.value) as Release).version + 1 : 1;
    const release: Release = { ...draft, version, createdAt: new Date().toISOString() };
    if (await store.create(releaseKey(draft.service, version), JSON.stringify(release))) return release;
  }
}
