// The Store interface in process, for single-machine installs without etcd (`platform up`).
//
// It keeps etcd's model so both implementations pass one contract suite: a global revision that
// every committed write increments once, createRevision/modRevision/version per key, transactions
// whose compares see an absent key as revision 0, leases whose expiry deletes their keys, and
// prefix watches delivered in revision order.
//
// Durability: every write is appended to a JSON-lines log and fsynced before the call resolves
// (concurrent writes share one fsync). Open replays snapshot + log; when the log grows past
// COMPACT_LOG_BYTES the whole state goes to a new snapshot (temp file, fsync, rename) and the
// log starts over. Watchers only see durable writes.
//
// Leases do not survive a restart: the only process that could keep them alive is the one that
// owned the store, so on open every key attached to a lease is deleted (etcd would expire them a
// TTL later anyway; here nobody is left to renew them).

import { countRead } from './store-metrics.js';
import { chmod, link, mkdir, open, readdir, readFile, rename, rm, stat, writeFile, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import {
  StoreUnavailableError,
  type Compare,
  type KeyValue,
  type Lease,
  type LeaseOptions,
  type Operation,
  type PutOptions,
  type Store,
  type TxnResult,
  type Watch,
  type WatchEvent,
} from './store.js';

const LOCK_FILE = 'store.lock';
const SNAPSHOT_FILE = 'store.snapshot.json';
const LOG_FILE = 'store.log.jsonl';
/** Log size that triggers a snapshot. */
const COMPACT_LOG_BYTES = 4 * 1024 * 1024;
/** Events kept for watches that start at an older revision. */
const HISTORY_LIMIT = 10_000;

interface Entry {
  value: string;
  createRevision: number;
  modRevision: number;
  version: number;
  lease?: string;
}

/** One key's change inside a committed revision; what the log records. */
type Change = { type: 'put'; key: string; value: string; lease?: string } | { type: 'delete'; key: string };

interface LogRecord {
  revision: number;
  changes: Change[];
}

interface Snapshot {
  revision: number;
  entries: [string, Entry][];
}

interface WriteResult {
  revision: number;
  changes: number;
  /** Resolves once the write is on disk. */
  durable: Promise<void>;
}

export class EmbeddedStore implements Store {
  readonly description: string;
  private revision: number;
  private readonly data: Map<string, Entry>;
  private readonly leases = new Map<string, LeaseState>();
  private nextLeaseId = Date.now();
  private readonly watchers = new Set<WatcherState>();
  /** Published events, oldest first, for `fromRevision`. */
  private readonly history: WatchEvent[] = [];
  /** Highest revision whose events are no longer (entirely) in `history`. */
  private compactedRevision: number;
  private closed = false;

  private constructor(
    private readonly dir: string,
    private readonly journal: Journal,
    state: Snapshot,
  ) {
    this.description = `embedded ${dir}`;
    this.revision = state.revision;
    this.data = new Map(state.entries);
    this.compactedRevision = state.revision;
  }

  static async open(dataDir: string): Promise<EmbeddedStore> {
    await keepPrivate(dataDir);
    const lockPath = join(dataDir, LOCK_FILE);
    await acquireLock(lockPath);
    try {
      const state = dropLeasedKeys(await loadState(dataDir));
      const journal = await Journal.start(dataDir, state);
      const store = new EmbeddedStore(dataDir, journal, state);
      journal.snapshotSource = () => store.snapshot();
      return store;
    } catch (error) {
      await releaseLock(lockPath);
      throw error;
    }
  }

  async get(key: string): Promise<KeyValue | undefined> {
    this.assertUsable();
    const entry = this.data.get(key);
    countRead('get', entry ? 1 : 0);
    return entry ? toKeyValue(key, entry) : undefined;
  }

  async list(prefix: string): Promise<KeyValue[]> {
    this.assertUsable();
    const keys = this.keysWithPrefix(prefix);
    countRead('list', keys.length);
    return keys.map((key) => toKeyValue(key, this.data.get(key)!));
  }

  async listWithRevision(prefix: string): Promise<{ revision: number; kvs: KeyValue[] }> {
    // The map is read synchronously, so no write lands between the list and the revision.
    const revision = this.revision;
    return { revision, kvs: await this.list(prefix) };
  }

  async put(key: string, value: string, options: PutOptions = {}): Promise<number> {
    const result = this.write([{ op: 'put', key, value, lease: options.lease }]);
    await result.durable;
    return result.revision;
  }

  async delete(key: string): Promise<boolean> {
    const result = this.write([{ op: 'delete', key }]);
    await result.durable;
    return result.changes > 0;
  }

  async deletePrefix(prefix: string): Promise<number> {
    const result = this.write([{ op: 'deletePrefix', prefix }]);
    await result.durable;
    return result.changes;
  }

  async create(key: string, value: string, options: PutOptions = {}): Promise<boolean> {
    const result = await this.txn([{ key, target: 'createRevision', equals: 0 }], [{ op: 'put', key, value, lease: options.lease }]);
    return result.succeeded;
  }

  async compareAndSwap(key: string, value: string, expectedModRevision: number, options: PutOptions = {}): Promise<boolean> {
    const result = await this.txn(
      [{ key, target: 'modRevision', equals: expectedModRevision }],
      [{ op: 'put', key, value, lease: options.lease }],
    );
    return result.succeeded;
  }

  async txn(compares: Compare[], success: Operation[], failure: Operation[] = []): Promise<TxnResult> {
    this.assertUsable();
    // Compare and apply run synchronously, so no other call interleaves: that is the atomicity.
    const succeeded = compares.every((compare) => this.holds(compare));
    const result = this.write(succeeded ? success : failure);
    await result.durable;
    return { succeeded, revision: result.revision };
  }

  async grantLease(ttlSeconds: number, options: LeaseOptions = {}): Promise<Lease> {
    this.assertUsable();
    if (!Number.isInteger(ttlSeconds) || ttlSeconds < 1) throw new RangeError(`lease TTL must be a whole number of seconds >= 1, got ${ttlSeconds}`);
    const lease = new LeaseState(String(this.nextLeaseId++), ttlSeconds, this);
    this.leases.set(lease.id, lease);
    lease.start(options.autoKeepAlive !== false);
    return lease;
  }

  async watchPrefix(prefix: string, onEvent: (event: WatchEvent) => void, options: { fromRevision?: number } = {}): Promise<Watch> {
    this.assertUsable();
    const from = options.fromRevision;
    // Like etcd, revision 0 (or none) means "after the current revision".
    const startRevision = from !== undefined && from > 0 ? from : this.revision + 1;
    if (startRevision <= this.compactedRevision) {
      throw new Error(
        `cannot watch ${prefix} from revision ${startRevision}: the embedded store keeps events from revision ${this.compactedRevision + 1} on`,
      );
    }
    const watcher = new WatcherState(prefix, onEvent, startRevision);
    for (const event of this.history) watcher.offer(event);
    this.watchers.add(watcher);
    return {
      close: async () => {
        watcher.closed = true;
        this.watchers.delete(watcher);
      },
    };
  }

  async ping(): Promise<void> {
    this.assertUsable();
  }

  async dbSize(): Promise<number> {
    this.assertUsable();
    const sizes = await Promise.all([SNAPSHOT_FILE, LOG_FILE].map((file) => stat(join(this.dir, file)).then((info) => info.size, () => 0)));
    return sizes.reduce((sum, size) => sum + size, 0);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // Leases are not revoked: their keys are dropped on the next open anyway (see the top).
    for (const lease of this.leases.values()) lease.stop();
    this.leases.clear();
    for (const watcher of this.watchers) watcher.closed = true;
    this.watchers.clear();
    await this.journal.close();
    await releaseLock(join(this.dir, LOCK_FILE));
  }

  // ---- writes ----

  /**
   * Applies `operations` as one revision (or none, when nothing changes) and logs it. Throws
   * before changing anything when an operation is invalid.
   */
  private write(operations: Operation[]): WriteResult {
    this.assertUsable();
    this.validate(operations);
    const revision = this.revision + 1;
    const changes: Change[] = [];
    const events: WatchEvent[] = [];
    // Expand and apply one operation at a time, so each sees the effect of the previous ones.
    for (const operation of operations) {
      for (const change of this.expand(operation)) {
        changes.push(change);
        events.push(this.apply(change, revision));
      }
    }
    if (changes.length === 0) return { revision: this.revision, changes: 0, durable: Promise.resolve() };
    this.revision = revision;
    const durable = this.journal.append({ revision, changes }).then(() => this.publish(events));
    return { revision, changes: changes.length, durable: durable.catch((error) => this.unavailable(error)) };
  }

  private validate(operations: Operation[]): void {
    for (const operation of operations) {
      if (operation.op === 'put' && operation.key === '') throw new Error('a key must not be empty');
      if (operation.op === 'put' && operation.lease !== undefined && !this.leases.has(operation.lease)) {
        throw new Error(`lease ${operation.lease} not found (expired or revoked)`);
      }
    }
  }

  /** The per-key changes of one operation, against the state as it is now. */
  private expand(operation: Operation): Change[] {
    switch (operation.op) {
      case 'put': {
        const change: Change = { type: 'put', key: operation.key, value: operation.value };
        if (operation.lease !== undefined) change.lease = operation.lease;
        return [change];
      }
      case 'delete':
        return this.data.has(operation.key) ? [{ type: 'delete', key: operation.key }] : [];
      case 'deletePrefix':
        return this.keysWithPrefix(operation.prefix).map((key) => ({ type: 'delete', key }));
    }
  }

  /** Applies one change in memory, keeping each lease's key set in step. */
  private apply(change: Change, revision: number): WatchEvent {
    const previous = this.data.get(change.key);
    if (previous?.lease !== undefined) this.leases.get(previous.lease)?.keys.delete(change.key);
    applyChange(this.data, change, revision);
    if (change.type === 'put' && change.lease !== undefined) this.leases.get(change.lease)?.keys.add(change.key);
    return change.type === 'put'
      ? { type: 'put', key: change.key, value: change.value, modRevision: revision }
      : { type: 'delete', key: change.key, modRevision: revision };
  }

  // ---- watches ----

  /** Hands durable events to the history and the matching watchers. */
  private publish(events: WatchEvent[]): void {
    this.history.push(...events);
    if (this.history.length > HISTORY_LIMIT + 1000) {
      // Trim in chunks, not one shift per event.
      const dropped = this.history.splice(0, this.history.length - HISTORY_LIMIT);
      this.compactedRevision = dropped[dropped.length - 1]!.modRevision;
    }
    for (const watcher of this.watchers) {
      for (const event of events) watcher.offer(event);
    }
  }

  // ---- leases (called by LeaseState) ----

  /** @internal Deletes the lease and its keys; a `reason` (expiry) also reaches its onLost listeners. */
  async endLease(lease: LeaseState, reason: Error | undefined): Promise<void> {
    if (this.leases.get(lease.id) !== lease) return; // already ended: revoke is idempotent, as in etcd
    this.leases.delete(lease.id);
    lease.stop();
    let durable: Promise<void>;
    try {
      durable = this.write([...lease.keys].map((key) => ({ op: 'delete', key }))).durable;
    } finally {
      // The owner hears of the loss once the keys are gone (in memory), as with etcd.
      if (reason) lease.fireLost(reason);
    }
    await durable;
  }

  /** @internal */
  hasLease(lease: LeaseState): boolean {
    return this.leases.get(lease.id) === lease;
  }

  // ---- helpers ----

  private holds(compare: Compare): boolean {
    const entry = this.data.get(compare.key);
    switch (compare.target) {
      case 'value':
        return entry !== undefined && entry.value === compare.equals;
      case 'modRevision':
        return (entry?.modRevision ?? 0) === compare.equals;
      case 'createRevision':
        return (entry?.createRevision ?? 0) === compare.equals;
      case 'version':
        return (entry?.version ?? 0) === compare.equals;
    }
  }

  /** Sorted like etcd for the ASCII keys the platform uses (etcd compares bytes). */
  private keysWithPrefix(prefix: string): string[] {
    const keys: string[] = [];
    for (const key of this.data.keys()) if (key.startsWith(prefix)) keys.push(key);
    return keys.sort();
  }

  private snapshot(): Snapshot {
    return { revision: this.revision, entries: [...this.data] };
  }

  /** @internal */
  assertUsable(): void {
    if (this.closed) throw new StoreUnavailableError(this.description, new Error('the store is closed'));
    if (this.journal.failure) this.unavailable(this.journal.failure);
  }

  private unavailable(cause: unknown): never {
    throw new StoreUnavailableError(this.description, cause);
  }
}

/** Applies a change to a key map: the one place that defines revision bookkeeping (live and replay). */
function applyChange(data: Map<string, Entry>, change: Change, revision: number): void {
  if (change.type === 'delete') {
    data.delete(change.key);
    return;
  }
  const previous = data.get(change.key);
  const entry: Entry = {
    value: change.value,
    createRevision: previous?.createRevision ?? revision,
    modRevision: revision,
    version: (previous?.version ?? 0) + 1,
  };
  if (change.lease !== undefined) entry.lease = change.lease;
  data.set(change.key, entry);
}

function toKeyValue(key: string, entry: Entry): KeyValue {
  return { key, ...entry };
}

class WatcherState {
  closed = false;
  private queue: WatchEvent[] = [];

  constructor(
    private readonly prefix: string,
    private readonly onEvent: (event: WatchEvent) => void,
    private readonly startRevision: number,
  ) {}

  /** Queues a matching event; delivery happens in a microtask, never inside the write call. */
  offer(event: WatchEvent): void {
    if (this.closed || event.modRevision < this.startRevision || !event.key.startsWith(this.prefix)) return;
    this.queue.push(event);
    if (this.queue.length === 1) queueMicrotask(() => this.drain());
  }

  private drain(): void {
    const events = this.queue;
    this.queue = [];
    for (const event of events) {
      if (this.closed) return;
      try {
        this.onEvent(event);
      } catch (error) {
        // A failing listener must not stop delivery to others; surface it like etcd3 does.
        queueMicrotask(() => {
          throw error;
        });
      }
    }
  }
}

class LeaseState implements Lease {
  readonly keys = new Set<string>();
  private expiryTimer: NodeJS.Timeout | undefined;
  private keepAliveTimer: NodeJS.Timeout | undefined;
  private readonly lostListeners: ((reason: Error) => void)[] = [];
  private lostReason: Error | undefined;

  constructor(
    readonly id: string,
    readonly ttlSeconds: number,
    private readonly store: EmbeddedStore,
  ) {}

  start(autoKeepAlive: boolean): void {
    this.refresh();
    // The keeper and the store share a process, but keeping the etcd mechanics (renew every
    // TTL/3 against a real expiry) keeps the behaviour identical, e.g. under a blocked event loop.
    if (autoKeepAlive) {
      this.keepAliveTimer = setInterval(() => this.refresh(), (this.ttlSeconds * 1000) / 3);
      this.keepAliveTimer.unref();
    }
  }

  async keepAliveOnce(): Promise<void> {
    this.store.assertUsable();
    if (!this.store.hasLease(this)) throw new Error(`lease ${this.id} not found (expired or revoked)`);
    this.refresh();
  }

  async revoke(): Promise<void> {
    this.store.assertUsable();
    await this.store.endLease(this, undefined);
  }

  release(): void {
    // The expiry timer stays: the keys go a TTL from the last keep-alive, as in etcd.
    clearInterval(this.keepAliveTimer);
  }

  onLost(listener: (reason: Error) => void): void {
    const reason = this.lostReason;
    if (reason) queueMicrotask(() => listener(reason));
    else this.lostListeners.push(listener);
  }

  fireLost(reason: Error): void {
    if (this.lostReason) return;
    this.lostReason = reason;
    for (const listener of this.lostListeners.splice(0)) listener(reason);
  }

  stop(): void {
    clearTimeout(this.expiryTimer);
    clearInterval(this.keepAliveTimer);
  }

  private refresh(): void {
    clearTimeout(this.expiryTimer);
    this.expiryTimer = setTimeout(() => this.expire(), this.ttlSeconds * 1000);
    this.expiryTimer.unref();
  }

  private expire(): void {
    const reason = new Error(`lease ${this.id} expired after ${this.ttlSeconds} s without keep-alive`);
    // A failed delete leaves the store failed; every later call reports it.
    this.store.endLease(this, reason).catch(() => undefined);
  }
}

// ---- persistence ----

/** Appends log records with group commit and rolls the log into snapshots. */
class Journal {
  failure: Error | undefined;
  snapshotSource: (() => Snapshot) | undefined;
  private pending: { line: string; resolve: () => void; reject: (error: Error) => void }[] = [];
  private flushing: Promise<void> | undefined;

  private constructor(
    private readonly dir: string,
    private readonly log: FileHandle,
    private bytes: number,
  ) {}

  /** Writes the opening state as the snapshot and starts an empty log. */
  static async start(dir: string, state: Snapshot): Promise<Journal> {
    await writeSnapshot(dir, state);
    await writeFile(join(dir, LOG_FILE), '', { mode: PRIVATE_FILE });
    // O_APPEND: every write lands at the end, also after truncate(0) in compact().
    const log = await open(join(dir, LOG_FILE), 'a', PRIVATE_FILE);
    await fsyncDir(dir);
    return new Journal(dir, log, 0);
  }

  append(record: LogRecord): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    return new Promise((resolve, reject) => {
      this.pending.push({ line: `${JSON.stringify(record)}\n`, resolve, reject });
      this.flushing ??= this.flush();
    });
  }

  async close(): Promise<void> {
    await this.flushing;
    await this.log.close();
  }

  /** Writes everything pending with one fsync per batch, until nothing is pending. */
  private async flush(): Promise<void> {
    while (this.pending.length > 0 && !this.failure) {
      const batch = this.pending.splice(0);
      const text = batch.map((item) => item.line).join('');
      try {
        await this.log.appendFile(text);
        await this.log.datasync();
      } catch (error) {
        // Memory is now ahead of disk: stop accepting writes rather than diverge further.
        this.failure = error instanceof Error ? error : new Error(String(error));
        for (const item of [...batch, ...this.pending.splice(0)]) item.reject(this.failure);
        break;
      }
      this.bytes += Buffer.byteLength(text);
      for (const item of batch) item.resolve();
      if (this.bytes > COMPACT_LOG_BYTES) await this.compact();
    }
    this.flushing = undefined;
  }

  /**
   * Snapshot of the in-memory state (which may include writes still pending in the next batch:
   * replay skips log records at or below the snapshot revision), then an empty log.
   */
  private async compact(): Promise<void> {
    if (!this.snapshotSource) return;
    try {
      await writeSnapshot(this.dir, this.snapshotSource());
      await this.log.truncate(0);
      await this.log.datasync();
      this.bytes = 0;
    } catch (error) {
      // The log is still complete, so this is not fatal; the next batch tries again.
      process.emitWarning(`embedded store ${this.dir}: snapshot failed: ${String(error)}`, 'StoreWarning');
    }
  }
}

async function loadState(dir: string): Promise<Snapshot> {
  const snapshot = await readSnapshot(dir);
  const data = new Map(snapshot.entries);
  let revision = snapshot.revision;
  for (const record of await readLog(dir)) {
    if (record.revision <= revision) continue; // already in the snapshot
    for (const change of record.changes) applyChange(data, change, record.revision);
    revision = record.revision;
  }
  return { revision, entries: [...data] };
}

async function readSnapshot(dir: string): Promise<Snapshot> {
  const text = await readFile(join(dir, SNAPSHOT_FILE), 'utf8').catch(ifMissing(''));
  if (text === '') return { revision: 0, entries: [] };
  return JSON.parse(text) as Snapshot;
}

async function readLog(dir: string): Promise<LogRecord[]> {
  const path = join(dir, LOG_FILE);
  const lines = (await readFile(path, 'utf8').catch(ifMissing(''))).split('\n');
  const records: LogRecord[] = [];
  for (const [index, line] of lines.entries()) {
    if (line === '') continue;
    try {
      records.push(JSON.parse(line) as LogRecord);
    } catch (error) {
      // Only the last line can be torn (a crash mid-append, never acknowledged to a caller).
      const isLast = lines.slice(index + 1).every((rest) => rest === '');
      if (isLast) break;
      throw new Error(`${path}: line ${index + 1} is corrupt: ${String(error)}`, { cause: error });
    }
  }
  return records;
}

/** Leased keys belong to leases of a previous process: drop them, as one new revision. */
function dropLeasedKeys(state: Snapshot): Snapshot {
  const kept = state.entries.filter(([, entry]) => entry.lease === undefined);
  if (kept.length === state.entries.length) return state;
  return { revision: state.revision + 1, entries: kept };
}

async function writeSnapshot(dir: string, snapshot: Snapshot): Promise<void> {
  const path = join(dir, SNAPSHOT_FILE);
  const temp = `${path}.tmp`;
  const file = await open(temp, 'w', PRIVATE_FILE);
  try {
    await file.writeFile(JSON.stringify(snapshot));
    await file.sync();
  } finally {
    await file.close();
  }
  await rename(temp, path);
  await fsyncDir(dir);
}

// The store holds every secret of the platform (the session key, registry logins, token hashes):
// a local user who can read it can forge an admin session. Only the owner may enter the directory
// or read a file in it, whatever the umask; a directory an older version left open is closed at open.
const PRIVATE_DIRECTORY = 0o700;
const PRIVATE_FILE = 0o600;

async function keepPrivate(dataDir: string): Promise<void> {
  await mkdir(dataDir, { recursive: true, mode: PRIVATE_DIRECTORY });
  await chmod(dataDir, PRIVATE_DIRECTORY);
  const entries = await readdir(dataDir, { withFileTypes: true });
  await Promise.all(entries.filter((entry) => entry.isFile()).map((entry) => chmod(join(dataDir, entry.name), PRIVATE_FILE)));
}

/** Makes a rename or a new file in `dir` durable. */
async function fsyncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

// ---- the lock ----

/**
 * One process per data directory. The lock file holds the owner's pid; a lock whose process is
 * gone (crash, kill -9) is stale and taken over. The file is written completely under a temporary
 * name and hard-linked into place, so nobody ever reads a half-written lock.
 */
async function acquireLock(path: string): Promise<void> {
  const temp = `${path}.${process.pid}.${Date.now()}`;
  await writeFile(temp, `${process.pid}\n`, { mode: PRIVATE_FILE });
  try {
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        await link(temp, path);
        return;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      }
      const owner = await lockOwner(path);
      if (owner !== undefined && isRunning(owner)) {
        const who = owner === process.pid ? 'this process' : `process ${owner}`;
        throw new Error(`the data directory is already in use by ${who} (lock file ${path}); stop it or use another --data-dir`);
      }
      await rm(path, { force: true }); // stale
    }
    throw new Error(`could not take the lock ${path}: another process keeps taking it`);
  } finally {
    await rm(temp, { force: true });
  }
}

async function releaseLock(path: string): Promise<void> {
  if ((await lockOwner(path)) === process.pid) await rm(path, { force: true });
}

async function lockOwner(path: string): Promise<number | undefined> {
  const text = await readFile(path, 'utf8').catch(ifMissing(''));
  const pid = Number.parseInt(text.trim(), 10);
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM'; // exists, owned by someone else
  }
}

function ifMissing<T>(fallback: T): (error: unknown) => T {
  return (error) => {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return fallback;
    throw error;
  };
}
