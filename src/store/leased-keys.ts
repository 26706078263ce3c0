// Keys that live exactly as long as their owner: component announcements
// (`/platform/services/<name>` = host:port) and an agent's machine registration and unit statuses.
//
// All keys share one lease, kept alive every TTL/3 by the store. When the lease is lost (the
// store was unreachable for longer than the TTL, or etcd forgot it), a recovery loop grants a new
// lease and writes every key again, with backoff while the store stays down. Callers never see
// store failures from set()/remove(): the loop retries them. close() revokes the lease, so the
// keys disappear at once instead of a TTL later.

import { trace } from '../trace.js';
import type { Lease, Operation, Store } from './store.js';
import { WorkQueue } from '../work-queue.js';

/** A pino/fastify logger fits; so does `console`. */
export interface LeasedKeysLog {
  info?(message: string): void;
  warn?(message: string): void;
}

/** A failed write is tried again after 250 ms, doubling up to 5 s; a new set() or remove() tries at once. */
const RETRY = { firstMs: 250, maxMs: 5000 };
/** Keys written per transaction: below etcd's default --max-txn-ops (128). */
const KEYS_PER_TXN = 100;

/**
 * How many lease TTLs the holders of leased keys are given to write them again before their
 * absence counts: after a scheduler is elected, and after the store returns from an outage (a
 * frozen etcd revokes every lease that expired while it hung the moment it wakes, before the
 * holders have granted new ones). A live holder renews every TTL/3 and retries within 5 s.
 */
export const RENEWAL_GRACE_TTLS = 3;

export class LeasedKeys {
  private lease: Lease | undefined;
  /** What the store should hold: key → value. */
  private readonly wanted = new Map<string, string>();
  /** Keys whose store copy may differ from `wanted` (absent from `wanted` = to delete). */
  private readonly dirty = new Set<string>();
  /**
   * Write attempts, one at a time; keys set in one turn of the event loop (ten units reporting
   * together) go in one attempt, and keys set during an attempt in one more after it.
   */
  private readonly writes = new WorkQueue({
    run: () => this.attempt(),
    onError: (error) => {
      if (!this.failing) this.log?.warn?.(`leased keys not written to ${this.store.description} (retrying): ${message(error)}`);
      this.failing = true;
    },
    retry: RETRY,
  });
  private failing = false;
  private closed = false;
  private readonly lostListeners: (() => void)[] = [];

  private constructor(
    private readonly store: Store,
    readonly ttlSeconds: number,
    private readonly log?: LeasedKeysLog,
  ) {}

  /** Grants the lease; if the store is down, returns anyway and keeps trying in the background. */
  static async start(store: Store, ttlSeconds = 10, log?: LeasedKeysLog): Promise<LeasedKeys> {
    // A bad TTL would fail every grant forever; say so at once instead.
    if (!Number.isInteger(ttlSeconds) || ttlSeconds < 1) throw new RangeError(`lease TTL must be a whole number of seconds >= 1, got ${ttlSeconds}`);
    const keys = new LeasedKeys(store, ttlSeconds, log);
    await keys.sync();
    return keys;
  }

  /** The current lease id, if one is held (for tests and diagnostics). */
  get leaseId(): string | undefined {
    return this.lease?.id;
  }

  /** Writes `key` under the lease. Resolves after one attempt; a failed attempt is retried in the background. */
  async set(key: string, value: string): Promise<void> {
    if (this.closed) throw new Error('LeasedKeys is closed');
    this.wanted.set(key, value);
    this.dirty.add(key);
    await this.sync();
  }

  /** Deletes `key` and stops maintaining it. */
  async remove(key: string): Promise<void> {
    if (this.closed) throw new Error('LeasedKeys is closed');
    this.wanted.delete(key);
    this.dirty.add(key);
    await this.sync();
  }

  /**
   * Stops maintaining `key` without writing anything: for a key whose store copy went with a
   * lost lease and must not be written again as it was (an agent's unit status, which only a
   * fresh look at its assignments can tell).
   */
  forget(key: string): void {
    this.wanted.delete(key);
    this.dirty.delete(key);
  }

  /**
   * Calls `listener` when the lease is lost, before the keys are written again under a new one,
   * so the owner can forget (`forget`) what it no longer knows to be true.
   */
  onLost(listener: () => void): void {
    this.lostListeners.push(listener);
  }

  /**
   * Stops maintaining the keys and revokes the lease, so they vanish from the store at once; with
   * `revoke: false` the lease is only released and the keys stay until its TTL runs out.
   */
  async close({ revoke = true }: { revoke?: boolean } = {}): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.writes.close();
    const lease = this.lease;
    this.lease = undefined;
    if (!lease) return;
    if (!revoke) return lease.release();
    try {
      await lease.revoke();
    } catch (error) {
      this.log?.warn?.(`could not revoke lease ${lease.id} (its keys expire within ${this.ttlSeconds} s): ${message(error)}`);
    }
  }

  /** Resolves after a write attempt that started after this call, successful or not. */
  private sync(): Promise<void> {
    return this.writes.add('keys');
  }

  /**
   * One pass: a lease if there is none, then every dirty key, in one transaction per 100 keys:
   * an agent starting ten units writes ten statuses at once, and one round trip (one etcd
   * commit) instead of ten in a row is what lets them land together.
   */
  private async attempt(): Promise<void> {
    if (this.closed || (this.lease !== undefined && this.dirty.size === 0)) return;
    const lease = this.lease ?? (await this.grant());
    // The keys dirty now; ones set meanwhile go in the next attempt, after this one's callers resolve.
    const keys = [...this.dirty];
    for (let at = 0; at < keys.length && !this.closed; at += KEYS_PER_TXN) await this.writeKeys(keys.slice(at, at + KEYS_PER_TXN), lease);
    if (this.failing) this.log?.info?.(`store ${this.store.description} reachable again; leased keys are written`);
    this.failing = false;
  }

  private async grant(): Promise<Lease> {
    const lease = await this.store.grantLease(this.ttlSeconds);
    if (this.closed) {
      // close() ran during the grant and will not see this lease: do not leak it.
      await lease.revoke().catch(() => undefined);
      return lease;
    }
    this.lease = lease;
    lease.onLost((reason) => this.lost(lease, reason));
    // A new lease holds nothing yet: every key must be written again.
    for (const key of this.wanted.keys()) this.dirty.add(key);
    return lease;
  }

  private lost(lease: Lease, reason: Error): void {
    if (this.lease !== lease || this.closed) return;
    this.log?.warn?.(`lease ${lease.id} lost (${reason.message}); granting a new one and rewriting ${this.wanted.size} key(s)`);
    this.lease = undefined;
    for (const listener of this.lostListeners) listener();
    void this.sync();
  }

  private async writeKeys(keys: string[], lease: Lease): Promise<void> {
    const operations: Operation[] = keys.map((key) => {
      const value = this.wanted.get(key);
      return value === undefined ? { op: 'delete', key } : { op: 'put', key, value, lease: lease.id };
    });
    // Clear first: a set() of the same key during the write marks it dirty again.
    for (const key of keys) this.dirty.delete(key);
    try {
      trace('leased.txn', `${operations.length}`);
      await this.store.txn([], operations);
      trace('leased.txn-done', `${operations.length}`);
    } catch (error) {
      for (const key of keys) this.dirty.add(key);
      throw error;
    }
  }
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
