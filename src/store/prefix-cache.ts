import { StoreUnavailableError, type Store, type Watch, type WatchEvent } from './store.js';
import { onStorePing } from './store-heartbeat.js';

// An in-memory copy of every key under a prefix, kept current by a watch (the informer pattern of
// Kubernetes clients), so hot read paths do not go to the store. Writers that must read their own
// writes wait for the write's revision with caughtUp(). While the store does not answer the
// periodic ping (one per store and process: store-heartbeat.ts), reads fail with StoreUnavailableError instead of serving an unknown staleness.

export interface CachedValue {
  key: string;
  value: string;
  modRevision: number;
}

// Entries are replaced, never mutated, on change: a parsed value can be memoised per entry.
const parsed = new WeakMap<CachedValue, unknown>();

/** The entry's JSON value, parsed once per version. Callers must not mutate it. */
export function decodeCached<T>(entry: CachedValue): T {
  if (!parsed.has(entry)) parsed.set(entry, JSON.parse(entry.value));
  return parsed.get(entry) as T;
}

/**
 * One watched copy per store and prefix in a process: `platform up` runs every role in one process,
 * and the roles that watch the same prefix (the declarations, the unit statuses, the announcements)
 * share one watch and one copy instead of keeping four or five. Each user holds a PrefixCache; the
 * watch ends when the last of them closes.
 */
const watchedPrefixes = new WeakMap<Store, Map<string, { watched: Promise<WatchedPrefix>; users: number }>>();

export class PrefixCache {
  private readonly stops: (() => void)[] = [];
  private closed = false;

  private constructor(
    private readonly watched: WatchedPrefix,
    private readonly release: () => Promise<void>,
  ) {}

  /** A copy of the prefix, shared with every other user of the same store and prefix in this process. */
  static async start(store: Store, prefix: string): Promise<PrefixCache> {
    let byPrefix = watchedPrefixes.get(store);
    if (!byPrefix) watchedPrefixes.set(store, (byPrefix = new Map()));
    const shared = byPrefix;
    let entry = shared.get(prefix);
    if (!entry) {
      const started = { watched: WatchedPrefix.start(store, prefix), users: 0 };
      // A watch that could not start is not kept: the next user tries again.
      started.watched.catch(() => shared.get(prefix) === started && shared.delete(prefix));
      shared.set(prefix, started);
      entry = started;
    }
    const used = entry;
    used.users += 1;
    const release = async () => {
      used.users -= 1;
      if (used.users > 0) return;
      if (shared.get(prefix) === used) shared.delete(prefix);
      await (await used.watched).close();
    };
    try {
      return new PrefixCache(await used.watched, release);
    } catch (error) {
      used.users -= 1;
      throw error;
    }
  }

  get prefix(): string {
    return this.watched.prefix;
  }

  /** Calls `listener` after every change the watch delivers (after the cache applied it); returns what stops it. Closing stops it too. */
  onChange(listener: (event: WatchEvent) => void): () => void {
    const stop = this.watched.onChange(listener);
    this.stops.push(stop);
    return stop;
  }

  get(key: string): CachedValue | undefined {
    return this.watched.get(key);
  }

  /** Every cached key, sorted by key as a store listing is. */
  values(): CachedValue[] {
    return this.watched.values();
  }

  /** Resolves once the watch has delivered `revision` (a write under the prefix), so reads see it. */
  caughtUp(revision: number, timeoutMs = 5000): Promise<void> {
    return this.watched.caughtUp(revision, timeoutMs);
  }

  /** Stops this user's listeners; the watch ends with its last user. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const stop of this.stops) stop();
    await this.release();
  }
}

/** The watch and the copy behind every PrefixCache of one store and prefix. */
class WatchedPrefix {
  private readonly entries = new Map<string, CachedValue>();
  /** Keys the watch changed while a listing was read, and at which revision: newer than the listing. */
  private changedDuringListing: Map<string, number> | undefined;
  private seenRevision = 0;
  private waiters: { revision: number; resolve: () => void }[] = [];
  private watch: Watch | undefined;
  private stopHearing: (() => void) | undefined;
  private unreachable: unknown;
  private readonly listeners: ((event: WatchEvent) => void)[] = [];

  private constructor(
    private readonly store: Store,
    readonly prefix: string,
  ) {}

  static async start(store: Store, prefix: string): Promise<WatchedPrefix> {
    const cache = new WatchedPrefix(store, prefix);
    // Watch first, then list: nothing written in between is missed, and revisions order the two.
    cache.watch = await store.watchPrefix(prefix, (event) => cache.apply(event));
    await cache.relist();
    cache.stopHearing = onStorePing(store, (failure) => void cache.heardPing(failure));
    return cache;
  }

  /** Calls `listener` after every change the watch delivers (after the cache applied it); returns what stops it. */
  onChange(listener: (event: WatchEvent) => void): () => void {
    this.listeners.push(listener);
    return () => {
      const at = this.listeners.indexOf(listener);
      if (at >= 0) this.listeners.splice(at, 1);
    };
  }

  /**
   * Calls every listener with the event. Over a copy of the list: a listener may stop itself or
   * another (an event stream that ends on a sign-out stops its own listeners), and removing from
   * the array being walked would skip the listener after it.
   */
  private notify(event: WatchEvent): void {
    for (const listener of [...this.listeners]) listener(event);
  }

  get(key: string): CachedValue | undefined {
    this.assertReachable();
    return this.entries.get(key);
  }

  /** Every cached key, sorted by key as a store listing is. */
  values(): CachedValue[] {
    this.assertReachable();
    return [...this.entries.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  }

  /** Resolves once the watch has delivered `revision` (a write under the prefix), so reads see it. */
  caughtUp(revision: number, timeoutMs = 5000): Promise<void> {
    if (this.seenRevision >= revision) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((waiter) => waiter.resolve !== done);
        reject(new StoreUnavailableError(this.store.description, new Error(`watch did not deliver revision ${revision} within ${timeoutMs} ms`)));
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        resolve();
      };
      this.waiters.push({ revision, resolve: done });
    });
  }

  async close(): Promise<void> {
    this.stopHearing?.();
    await this.watch?.close();
  }

  private apply(event: WatchEvent): void {
    const known = this.entries.get(event.key);
    if (!known || known.modRevision < event.modRevision) {
      if (event.type === 'put') this.entries.set(event.key, { key: event.key, value: event.value ?? '', modRevision: event.modRevision });
      else this.entries.delete(event.key);
    }
    this.changedDuringListing?.set(event.key, event.modRevision);
    this.advance(event.modRevision);
    this.notify(event);
  }

  private advance(revision: number): void {
    if (revision <= this.seenRevision) return;
    this.seenRevision = revision;
    const ready = this.waiters.filter((waiter) => waiter.revision <= revision);
    this.waiters = this.waiters.filter((waiter) => waiter.revision > revision);
    for (const waiter of ready) waiter.resolve();
  }

  /**
   * Merges a fresh listing into the cache. Run at start, and again when the store answers after
   * an outage, since a watch that reconnected may have missed events.
   */
  private async relist(): Promise<void> {
    const changed = new Map<string, number>();
    this.changedDuringListing = changed;
    const missed: WatchEvent[] = [];
    try {
      const listed = await this.store.list(this.prefix);
      const present = new Set<string>();
      for (const kv of listed) {
        present.add(kv.key);
        const known = this.entries.get(kv.key);
        if ((changed.get(kv.key) ?? 0) < kv.modRevision && (!known || known.modRevision < kv.modRevision)) {
          this.entries.set(kv.key, { key: kv.key, value: kv.value, modRevision: kv.modRevision });
          missed.push({ type: 'put', key: kv.key, value: kv.value, modRevision: kv.modRevision });
        }
        this.advance(kv.modRevision);
      }
      // A cached key the listing lacks was deleted, unless the watch changed it meanwhile.
      for (const key of [...this.entries.keys()]) {
        if (present.has(key) || changed.has(key)) continue;
        this.entries.delete(key);
        missed.push({ type: 'delete', key, modRevision: this.seenRevision });
      }
    } finally {
      this.changedDuringListing = undefined;
    }
    // What the watch missed during an outage reaches listeners as if it had delivered it.
    for (const event of missed) this.notify(event);
  }

  private async heardPing(failure: unknown): Promise<void> {
    if (failure !== undefined) {
      this.unreachable = failure;
      return;
    }
    try {
      if (this.unreachable !== undefined) await this.relist();
      this.unreachable = undefined;
    } catch (error) {
      this.unreachable = error;
    }
  }

  private assertReachable(): void {
    if (this.unreachable === undefined) return;
    throw this.unreachable instanceof StoreUnavailableError ? this.unreachable : new StoreUnavailableError(this.store.description, this.unreachable);
  }
}
