import { StoreUnavailableError, type Compare, type Operation, type Store, type TxnResult } from '../../src/store/store.js';

// A real store with a hook after the transactions that write some keys: to lose their answer after
// they committed (etcd's DEADLINE_EXCEEDED after the commit, what a client on a slow machine sees
// and the one outcome a writer cannot tell from a write that never happened), or to change the
// store between a write's commit and its answer.

/** Runs after a transaction writing the key (successful or not) was applied; what it returns or throws is the answer. */
export type AfterWrite = (result: TxnResult) => Promise<TxnResult>;

/** `inner` with `afterWrite` after every transaction (and create) that puts a key starting with `keyPrefix`. */
export function interceptWritesTo(inner: Store, keyPrefix: string, afterWrite: AfterWrite): Store {
  const puts = (operations: Operation[]): boolean => operations.some((operation) => operation.op === 'put' && operation.key.startsWith(keyPrefix));
  const txn = async (compares: Compare[], success: Operation[], failure: Operation[] = []): Promise<TxnResult> => {
    const result = await inner.txn(compares, success, failure);
    return puts(success) || puts(failure) ? afterWrite(result) : result;
  };
  const create = async (written: string, value: string, options?: { lease?: string }): Promise<boolean> =>
    (await txn([{ key: written, target: 'createRevision', equals: 0 }], [{ op: 'put', key: written, value, lease: options?.lease }])).succeeded;
  return new Proxy(inner, {
    get(target, property) {
      if (property === 'txn') return txn;
      if (property === 'create') return create;
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}

export interface LostAnswers {
  readonly store: Store;
  /** Answers lost so far. */
  readonly lost: number;
}

/** Loses the answers of the first `times` successful transactions that write a key starting with `keyPrefix`, after they committed. */
export function loseAnswersOfWritesTo(inner: Store, keyPrefix: string, times = 1): LostAnswers {
  let lost = 0;
  const store = interceptWritesTo(inner, keyPrefix, async (result) => {
    if (!result.succeeded || lost >= times) return result;
    lost += 1;
    throw new StoreUnavailableError(inner.description, new Error('4 DEADLINE_EXCEEDED: Deadline exceeded (the write committed; its answer was lost)'));
  });
  return {
    store,
    get lost() {
      return lost;
    },
  };
}
