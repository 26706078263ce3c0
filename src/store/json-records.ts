import type { Store, KeyValue } from './store.js';

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
 * conflict. Returns undefined when the key does not exist. `change` may throw to refuse.
 */
export async function updateRecord<T>(store: Store, key: string, change: (current: T) => T): Promise<T | undefined> {
  for (;;) {
    const current = await readRecord<T>(store, key);
    if (!current) return undefined;
    const next = change(current.record);
    if (await store.compareAndSwap(key, JSON.stringify(next), current.modRevision)) return next;
  }
}
