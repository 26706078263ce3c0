import type { Compare, KeyValue, Lease, LeaseOptions, Operation, PutOptions, Store, TxnResult, Watch, WatchEvent } from './store.js';

// A store whose every write carries extra compares (a fence), for a component that may only write
// while it holds something, like the scheduler's leadership: a write made after the fence moved
// fails as a whole instead of overwriting what the new holder wrote. Reads pass through.

export class FencedWriteError extends Error {
  constructor(reason: string) {
    super(`write refused: ${reason}`);
    this.name = 'FencedWriteError';
  }
}

export class FencedStore implements Store {
  readonly description: string;

  /** `fence` returns the compares every write must pass; it may throw when there is no fence to hold. */
  constructor(
    private readonly inner: Store,
    private readonly fence: () => Compare[],
  ) {
    this.description = inner.description;
  }

  get(key: string): Promise<KeyValue | undefined> {
    return this.inner.get(key);
  }

  list(prefix: string): Promise<KeyValue[]> {
    return this.inner.list(prefix);
  }

  listWithRevision(prefix: string): Promise<{ revision: number; kvs: KeyValue[] }> {
    return this.inner.listWithRevision(prefix);
  }

  async put(key: string, value: string, options?: PutOptions): Promise<number> {
    return (await this.fencedTxn([], [{ op: 'put', key, value, ...(options?.lease ? { lease: options.lease } : {}) }])).revision;
  }

  async delete(key: string): Promise<boolean> {
    const existed = await this.inner.get(key);
    await this.fencedTxn([], [{ op: 'delete', key }]);
    return existed !== undefined;
  }

  async deletePrefix(prefix: string): Promise<number> {
    const count = (await this.inner.list(prefix)).length;
    await this.fencedTxn([], [{ op: 'deletePrefix', prefix }]);
    return count;
  }

  async create(key: string, value: string, options?: PutOptions): Promise<boolean> {
    const put: Operation = { op: 'put', key, value, ...(options?.lease ? { lease: options.lease } : {}) };
    return (await this.txn([{ key, target: 'createRevision', equals: 0 }], [put])).succeeded;
  }

  async compareAndSwap(key: string, value: string, expectedModRevision: number, options?: PutOptions): Promise<boolean> {
    const put: Operation = { op: 'put', key, value, ...(options?.lease ? { lease: options.lease } : {}) };
    return (await this.txn([{ key, target: 'modRevision', equals: expectedModRevision }], [put])).succeeded;
  }

  /** Fails (succeeded: false) when the caller's compares fail; throws FencedWriteError when the fence does. */
  async txn(compares: Compare[], success: Operation[], failure: Operation[] = []): Promise<TxnResult> {
    const fence = this.fence();
    const result = await this.inner.txn([...fence, ...compares], success, failure);
    if (!result.succeeded) await this.assertFenceHolds(fence);
    return result;
  }

  grantLease(ttlSeconds: number, options?: LeaseOptions): Promise<Lease> {
    return this.inner.grantLease(ttlSeconds, options);
  }

  watchPrefix(prefix: string, onEvent: (event: WatchEvent) => void, options?: { fromRevision?: number }): Promise<Watch> {
    return this.inner.watchPrefix(prefix, onEvent, options);
  }

  ping(): Promise<void> {
    return this.inner.ping();
  }

  dbSize(): Promise<number> {
    return this.inner.dbSize();
  }

  close(): Promise<void> {
    return this.inner.close();
  }

  private async fencedTxn(compares: Compare[], success: Operation[]): Promise<TxnResult> {
    const result = await this.txn(compares, success);
    if (!result.succeeded) throw new FencedWriteError('the fence moved');
    return result;
  }

  private async assertFenceHolds(fence: Compare[]): Promise<void> {
    for (const compare of fence) {
      const kv = await this.inner.get(compare.key);
      const actual = compare.target === 'value' ? kv?.value : kv ? kv[compare.target] : 0;
      if (actual !== compare.equals) throw new FencedWriteError(`${compare.key} ${compare.target} is ${String(actual)}, not ${String(compare.equals)}`);
    }
  }
}
