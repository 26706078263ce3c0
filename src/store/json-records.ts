import type { KeyValue, Operation, Store } from './store.js';

// JSON records in the store: read, list, and update under compare-and-swap so concurrent
// writers never lose each other's changes.

export interface Versioned<T> {
  record: T;
  modRevision: number;
}

export const decode = <T>(kv: KeyValue): T => JSON.parse(kv.value) as T;

export async function readRecord<T>(store: Store, key: string): Promise<Versioned<T> | undefined> {
  const kv = await store.get(key);
  return kv ? { record: decode<T>(kv), modRevision: kv.modRevision } : undefined;
}

export async function listRecords<T>(store: Store, prefix: string): Promise<T[]> {
  return (await store.list(prefix)).map((kv) => decode<T>(kv));
}

/**
 * Applies `change` to the record at `key` and writes it if nobody wrote in between, retrying on
 * conflict. Returns the record and the write's revision, or undefined when the key does not
 * exist. `change` may throw to refuse. `alsoWrite` adds writes that must land with the record's
 * (its journal line, say) in the same transaction. `known` is a version the caller holds (its
 * own last write): the first attempt compares against it instead of reading, one round trip
 * instead of two; if the record moved since, it is read and the change applied again.
 */
export async function updateRecord<T>(
  store: Store,
  key: string,
  change: (current: T) => T,
  alsoWrite: (record: T) => Operation[] = () => [],
  known?: Versioned<T>,
): Promise<{ record: T; revision: number } | undefined> {
  let current = known ?? (await readRecord<T>(store, key));
  for (;;) {
    if (!current) return undefined;
    const record = change(current.record);
    const result = await store.txn(
      [{ key, target: 'modRevision', equals: current.modRevision }],
      [{ op: 'put', key, value: JSON.stringify(record) }, ...alsoWrite(record)],
    );
    if (result.succeeded) return { record, revision: result.revision };
    current = await readRecord<T>(store, key);
  }
}

/** Create-if-absent that also tells the write's revision (0 when the key existed). */
export async function createRecord<T>(store: Store, key: string, record: T): Promise<number> {
  const result = await store.txn([{ key, target: 'createRevision', equals: 0 }], [{ op: 'put', key, value: JSON.stringify(record) }]);
  return result.succeeded ? result.revision : 0;
}

/** Deletes the key; returns the revision of the deletion, or 0 when it did not exist. */
export async function deleteRecord(store: Store, key: string): Promise<number> {
  const result = await store.txn([{ key, target: 'version', equals: 0 }], [], [{ op: 'delete', key }]);
  return result.succeeded ? 0 : result.revision;
}

/** Deletes per store transaction (etcd allows 128 operations in one by default). */
const DELETE_BATCH = 100;

/** Deletes the keys in transactions of up to 100 keys each. */
export async function deleteKeys(store: Store, keys: readonly string[]): Promise<void> {
  for (let i = 0; i < keys.length; i += DELETE_BATCH) {
    await store.txn([], keys.slice(i, i + DELETE_BATCH).map((key) => ({ op: 'delete' as const, key })));
  }
}
