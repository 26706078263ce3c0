// The key-value store interface every role talks to. Two implementations pass the same contract
// suite (test/integration/store-contract.test.ts): etcd through etcd3 (etcd-store.ts) and the
// in-process embedded store persisted under --data-dir (embedded-store.ts).

export interface KeyValue {
  key: string;
  value: string;
  /** Store revision at which the key was created (etcd's create_revision). */
  createRevision: number;
  /** Store revision of the last write to the key (etcd's mod_revision). */
  modRevision: number;
  /** Number of writes since the key was created (etcd's version). */
  version: number;
  /** Lease the key is attached to, if any. */
  lease?: string;
}

/**
 * A condition of a transaction. `createRevision: 0` / `version: 0` mean "the key does not exist",
 * as in etcd.
 */
export type Compare =
  | { key: string; target: 'modRevision' | 'createRevision' | 'version'; equals: number }
  | { key: string; target: 'value'; equals: string };

export type Operation =
  | { op: 'put'; key: string; value: string; lease?: string }
  | { op: 'delete'; key: string }
  | { op: 'deletePrefix'; prefix: string };

export interface TxnResult {
  succeeded: boolean;
  /** Store revision after the transaction. */
  revision: number;
}

export interface WatchEvent {
  type: 'put' | 'delete';
  key: string;
  /** The new value for `put`; absent for `delete`. */
  value?: string;
  modRevision: number;
}

export interface Watch {
  close(): Promise<void>;
}

export interface PutOptions {
  /** Attach the key to this lease: it disappears when the lease expires or is revoked. */
  lease?: string;
}

export interface LeaseOptions {
  /** Keep the lease alive every TTL/3 until revoked (default true). */
  autoKeepAlive?: boolean;
}

export interface Lease {
  readonly id: string;
  readonly ttlSeconds: number;
  /** Refresh the TTL once (used when autoKeepAlive is off). */
  keepAliveOnce(): Promise<void>;
  /** Revoke the lease: its keys are deleted at once. */
  revoke(): Promise<void>;
  /**
   * Stop keeping the lease alive without revoking it: its keys stay until the TTL runs out, so an
   * owner that restarts within it (an agent) takes them over instead of them vanishing and coming back.
   */
  release(): void;
  /**
   * Called once when the lease is known to be gone (expired while the store was unreachable,
   * or revoked elsewhere). The owner must grant a new lease and rewrite its keys.
   */
  onLost(listener: (reason: Error) => void): void;
}

export interface Store {
  /** What backs this store, for logs and /readyz ("etcd http://127.0.0.1:2379", "embedded /var/lib/platform"). */
  readonly description: string;
  get(key: string): Promise<KeyValue | undefined>;
  /** Every key starting with `prefix`, sorted by key. */
  list(prefix: string): Promise<KeyValue[]>;
  /** `list` and the store revision it was read at, in one read: what a backup needs to name its revision. */
  listWithRevision(prefix: string): Promise<{ revision: number; kvs: KeyValue[] }>;
  /** Returns the store revision after the write. */
  put(key: string, value: string, options?: PutOptions): Promise<number>;
  /** Returns whether the key existed. */
  delete(key: string): Promise<boolean>;
  /** Returns how many keys were deleted. */
  deletePrefix(prefix: string): Promise<number>;
  /** Create-if-absent: returns false (and writes nothing) when the key exists. */
  create(key: string, value: string, options?: PutOptions): Promise<boolean>;
  /** Writes only if the key's modRevision still equals `expectedModRevision`. */
  compareAndSwap(key: string, value: string, expectedModRevision: number, options?: PutOptions): Promise<boolean>;
  /** All compares true → `success` ops run atomically, else `failure` ops. */
  txn(compares: Compare[], success: Operation[], failure?: Operation[]): Promise<TxnResult>;
  grantLease(ttlSeconds: number, options?: LeaseOptions): Promise<Lease>;
  /**
   * Calls `onEvent` for every change under `prefix`, in revision order, starting after the
   * current revision, or at `fromRevision` when given.
   */
  watchPrefix(prefix: string, onEvent: (event: WatchEvent) => void, options?: { fromRevision?: number }): Promise<Watch>;
  /** Resolves when the store answers; rejects with StoreUnavailableError otherwise. */
  ping(): Promise<void>;
  /** Bytes the store takes on disk (etcd's dbSize of the member that answers; the embedded store's files), as its space quota counts them. */
  dbSize(): Promise<number>;
  close(): Promise<void>;
}

/** Every store failure surfaces as this error, so HTTP handlers can answer 503 naming the store. */
export class StoreUnavailableError extends Error {
  constructor(description: string, cause: unknown) {
    super(`key-value store (${description}) is unreachable: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'StoreUnavailableError';
  }
}
