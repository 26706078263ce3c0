import type { KeyValue, Store } from './store.js';

// A write whose answer did not arrive (its deadline passed, the connection broke) may have
// committed: etcd applied it and only the answer was lost, which happens on slow machines
// (DEADLINE_EXCEEDED, issue 30 item 3). A create-if-absent tried again then finds the key and
// reads "someone else has it", so the writer loses what it wrote: the first admin token's secret,
// a webhook delivery it never handled. A writer whose value no other writer could have written
// (it holds a fresh secret or nonce) reads the key instead and knows.

/**
 * After a write of `value` to `key` failed with `error`: the key, when it holds exactly `value`
 * (the write committed); otherwise `error` is thrown again, as is any error of the read.
 */
export async function committedDespite(error: unknown, store: Store, key: string, value: string): Promise<KeyValue> {
  const current = await store.get(key).catch(() => undefined);
  if (current?.value === value) return current;
  throw error;
}
