// The Store interface on etcd v3 through the etcd3 client.
//
// etcd3 retries, reconnects watch streams and keeps leases alive by itself; what this module adds:
// - bounded calls: every unary call has a deadline and a dead etcd fails fast, so HTTP handlers can
//   answer 503 within a few seconds instead of hanging (etcd3's `dialTimeout` option is unused by
//   the 1.1.x client, so deadlines go through `defaultCallOptions`);
// - short reconnect backoffs, so watches and keep-alives resume within ~1-2 s after etcd restarts
//   (etcd3's defaults: watch backoff up to 30 s, circuit breaker open for 5 s);
// - one error type, StoreUnavailableError, for every failure;
// - numbers for revisions and strings for values.

import { rootCertificates } from 'node:tls';
import { countRead } from './store-metrics.js';
import { ConsecutiveBreaker, ExponentialBackoff, circuitBreaker, handleWhen, retry } from 'cockatiel';
import {
  Etcd3,
  GRPCUnavailableError,
  isRecoverableError,
  Range,
  type IKeyValue,
  type IOptions,
  type IRequestOp,
  type ICompare,
  type Lease as Etcd3Lease,
  type Watcher,
} from 'etcd3';
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

export interface EtcdStoreOptions {
  /** Deadline of one unary call attempt (default 1500 ms). */
  callTimeoutMs?: number;
  security?: EtcdSecurity;
}

/** How this process proves itself to etcd and checks etcd's certificate (docs/security.md "Securing etcd"). */
export interface EtcdSecurity {
  /** PEM of the CA that signed etcd's server certificate; without it, the system's CAs (https:// URLs only). */
  ca?: Buffer;
  /** PEM client certificate and its key, for an etcd started with --client-cert-auth. */
  cert?: Buffer;
  key?: Buffer;
  /** A user of etcd's own authentication (`etcdctl auth enable`). Never logged or shown. */
  user?: { name: string; password: string };
}

/** Streams (watch creation, a single keep-alive) have no gRPC deadline; they get this bound instead. */
const STREAM_TIMEOUT_MS = 3000;

export class EtcdStore implements Store {
  readonly description: string;
  private readonly client: Etcd3;
  private readonly leases = new Set<Etcd3Lease>();
  private readonly watchers = new Set<Watcher>();
  private closed = false;

  constructor(hosts: string[], options: EtcdStoreOptions = {}) {
    if (hosts.length === 0) throw new Error('EtcdStore needs at least one etcd URL');
    this.description = `etcd ${hosts.join(',')}`;
    this.client = new Etcd3(clientOptions(hosts, options.callTimeoutMs ?? 1500, options.security ?? {}));
  }

  async get(key: string): Promise<KeyValue | undefined> {
    const response = await this.call(() => this.client.get(key).exec());
    const kv = response.kvs[0];
    countRead('get', kv ? 1 : 0);
    return kv ? toKeyValue(kv) : undefined;
  }

  async list(prefix: string): Promise<KeyValue[]> {
    return (await this.listWithRevision(prefix)).kvs;
  }

  async listWithRevision(prefix: string): Promise<{ revision: number; kvs: KeyValue[] }> {
    const response = await this.call(() => this.client.getAll().prefix(prefix).sort('Key', 'Ascend').exec());
    countRead('list', response.kvs.length);
    return { revision: Number(response.header.revision), kvs: response.kvs.map(toKeyValue) };
  }

  async put(key: string, value: string, options: PutOptions = {}): Promise<number> {
    const response = await this.call(() => {
      const builder = this.client.put(key).value(value);
      if (options.lease !== undefined) builder.lease(options.lease);
      return builder.exec();
    });
    return Number(response.header.revision);
  }

  async delete(key: string): Promise<boolean> {
    const response = await this.call(() => this.client.delete().key(key).exec());
    return Number(response.deleted) > 0;
  }

  async deletePrefix(prefix: string): Promise<number> {
    const response = await this.call(() => this.client.delete().prefix(prefix).exec());
    return Number(response.deleted);
  }

  async create(key: string, value: string, options: PutOptions = {}): Promise<boolean> {
    const result = await this.txn(
      [{ key, target: 'createRevision', equals: 0 }],
      [{ op: 'put', key, value, lease: options.lease }],
    );
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
    const response = await this.call(() =>
      this.client.kv.txn({
        compare: compares.map(toCompare),
        success: success.map(toRequestOp),
        failure: failure.map(toRequestOp),
      }),
    );
    return { succeeded: response.succeeded, revision: Number(response.header.revision) };
  }

  async grantLease(ttlSeconds: number, options: LeaseOptions = {}): Promise<Lease> {
    const inner = this.client.lease(ttlSeconds, { autoKeepAlive: options.autoKeepAlive !== false });
    // Listen before the grant resolves: etcd3 emits 'lost' when the grant itself fails.
    const lost = new LostSignal();
    inner.on('lost', (error) => {
      this.leases.delete(inner);
      lost.fire(error);
    });
    this.leases.add(inner);
    try {
      const id = await this.call(() => inner.grant());
      return new EtcdLease(inner, id, ttlSeconds, lost, this);
    } catch (error) {
      this.leases.delete(inner);
      throw error;
    }
  }

  async watchPrefix(prefix: string, onEvent: (event: WatchEvent) => void, options: { fromRevision?: number } = {}): Promise<Watch> {
    this.assertOpen();
    const builder = this.client.watch().prefix(prefix);
    if (options.fromRevision !== undefined) builder.startRevision(String(options.fromRevision));
    const watcher = builder.watcher();
    this.watchers.add(watcher);
    forwardEvents(watcher, onEvent, this.description);
    try {
      await this.call(() => connected(watcher));
    } catch (error) {
      this.watchers.delete(watcher);
      void watcher.cancel().catch(() => undefined);
      throw error;
    }
    return {
      close: async () => {
        this.watchers.delete(watcher);
        await cancelWatcher(watcher);
      },
    };
  }

  async ping(): Promise<void> {
    // A linearizable range read: answers only when the cluster has a leader and a quorum.
    await this.call(() => this.client.get('/platform/').exec());
  }

  async dbSize(): Promise<number> {
    // The physical size, not dbSizeInUse: etcd's quota alarm counts what the file takes until a defragmentation.
    const status = await this.call(() => this.client.maintenance.status());
    return Number(status.dbSize);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // Stop keep-alive loops first: after client.close() they would spin on a closed client.
    // Released leases expire on their own; owners that want keys gone at once revoke first.
    for (const lease of this.leases) lease.release();
    this.leases.clear();
    await Promise.all([...this.watchers].map(cancelWatcher));
    this.watchers.clear();
    this.client.close();
  }

  /** @internal Runs one etcd call, turning every failure into StoreUnavailableError. */
  async call<T>(fn: () => Promise<T>): Promise<T> {
    this.assertOpen();
    try {
      return await fn();
    } catch (error) {
      throw new StoreUnavailableError(this.description, error);
    }
  }

  /** @internal */
  forgetLease(inner: Etcd3Lease): void {
    this.leases.delete(inner);
  }

  private assertOpen(): void {
    if (this.closed) throw new StoreUnavailableError(this.description, new Error('the store client is closed'));
  }
}

function clientOptions(hosts: string[], callTimeoutMs: number, security: EtcdSecurity): IOptions {
  const { ca, cert, key, user } = security;
  return {
    hosts,
    // Without credentials etcd3 still speaks TLS (with the system's CAs) to https:// URLs.
    ...(ca || cert ? { credentials: { rootCertificate: ca ?? Buffer.from(rootCertificates.join('\n')), ...(cert && key ? { certChain: cert, privateKey: key } : {}) } } : {}),
    ...(user ? { auth: { username: user.name, password: user.password } } : {}),
    defaultCallOptions: (context) => (context.isStream ? {} : { deadline: Date.now() + callTimeoutMs }),
    grpcOptions: {
      // Reconnect quickly after etcd restarts (gRPC's default backoff grows to 120 s).
      'grpc.initial_reconnect_backoff_ms': 100,
      'grpc.max_reconnect_backoff_ms': 1000,
      // Detect a silently dead connection under a watch; etcd rejects pings more often than 5 s.
      'grpc.keepalive_time_ms': 10_000,
      'grpc.keepalive_timeout_ms': 5_000,
      // Whole prefixes are listed (every deployment, every unit status); gRPC's default limit of
      // 4 MiB per message would fail those reads on a large cluster with RESOURCE_EXHAUSTED.
      'grpc.max_receive_message_length': 128 * 1024 * 1024,
    },
    faultHandling: {
      // Skip a failing member of a cluster for one second, not etcd3's default five.
      host: () => circuitBreaker(handleWhen(isRecoverableError), { halfOpenAfter: 1000, breaker: new ConsecutiveBreaker(3) }),
      // Retry only "unavailable" (normally: nothing was sent), so a write that timed out is not
      // applied twice; the retry goes to another member when there are several.
      global: retry(handleWhen((error) => error instanceof GRPCUnavailableError), {
        maxAttempts: hosts.length > 1 ? hosts.length : 1,
        backoff: new ExponentialBackoff({ initialDelay: 50, maxDelay: 250 }),
      }),
      // Typed as a backoff but used as a factory (etcd3 calls next() on it): its steps are 100 ms..1 s.
      watchBackoff: new ExponentialBackoff({ initialDelay: 100, maxDelay: 1000 }).next(),
    },
  };
}

function toKeyValue(kv: IKeyValue): KeyValue {
  const result: KeyValue = {
    key: kv.key.toString(),
    value: kv.value.toString(),
    createRevision: Number(kv.create_revision),
    modRevision: Number(kv.mod_revision),
    version: Number(kv.version),
  };
  if (kv.lease && kv.lease !== '0') result.lease = kv.lease;
  return result;
}

function toCompare(compare: Compare): ICompare {
  const key = Buffer.from(compare.key);
  switch (compare.target) {
    case 'value':
      return { key, target: 'Value', result: 'Equal', value: Buffer.from(compare.equals) };
    case 'modRevision':
      return { key, target: 'Mod', result: 'Equal', mod_revision: compare.equals };
    case 'createRevision':
      return { key, target: 'Create', result: 'Equal', create_revision: compare.equals };
    case 'version':
      return { key, target: 'Version', result: 'Equal', version: compare.equals };
  }
}

function toRequestOp(operation: Operation): IRequestOp {
  switch (operation.op) {
    case 'put':
      return {
        request_put: {
          key: Buffer.from(operation.key),
          value: Buffer.from(operation.value),
          ...(operation.lease !== undefined ? { lease: operation.lease } : {}),
        },
      };
    case 'delete':
      return { request_delete_range: { key: Buffer.from(operation.key) } };
    case 'deletePrefix': {
      const range = Range.prefix(operation.prefix); // the empty prefix is the whole keyspace, as in etcd3
      return { request_delete_range: { key: range.start, range_end: range.end } };
    }
  }
}

function forwardEvents(watcher: Watcher, onEvent: (event: WatchEvent) => void, description: string): void {
  // etcd3 resumes a broken stream from the last revision it saw; this guard drops anything older
  // should a resumed stream ever repeat a revision already delivered.
  let lastRevision = 0;
  const deliver = (event: WatchEvent): void => {
    if (event.modRevision < lastRevision) return;
    lastRevision = event.modRevision;
    onEvent(event);
  };
  watcher.on('put', (kv) =>
    deliver({ type: 'put', key: kv.key.toString(), value: kv.value.toString(), modRevision: Number(kv.mod_revision) }),
  );
  watcher.on('delete', (kv) => deliver({ type: 'delete', key: kv.key.toString(), modRevision: Number(kv.mod_revision) }));
  // etcd cancels a watch it cannot continue (its start revision was compacted away). The Watch
  // interface has no error channel, so the owner cannot be told; say it loudly instead of
  // crashing on an unhandled 'error' event.
  watcher.on('error', (error: Error) => {
    process.emitWarning(`watch on ${description} ended: ${error.message}`, 'StoreWatchWarning');
  });
}

/** Resolves when etcd confirmed the watch, rejects on its refusal or after STREAM_TIMEOUT_MS. */
function connected(watcher: Watcher): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = (error?: Error): void => {
      clearTimeout(timer);
      watcher.off('connected', onConnected);
      watcher.off('error', onError);
      if (error) reject(error);
      else resolve();
    };
    const onConnected = (): void => done();
    const onError = (error: Error): void => done(error);
    const timer = setTimeout(() => done(new Error(`watch not established within ${STREAM_TIMEOUT_MS} ms`)), STREAM_TIMEOUT_MS);
    watcher.on('connected', onConnected);
    watcher.on('error', onError);
  });
}

async function cancelWatcher(watcher: Watcher): Promise<void> {
  // Cancelling waits for etcd's confirmation; with etcd down that may never come.
  await withTimeout(watcher.cancel(), STREAM_TIMEOUT_MS, 'cancel watch').catch(() => undefined);
  watcher.removeAllListeners('put');
  watcher.removeAllListeners('delete');
}

function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Fires its listeners once, with the first reason; late listeners hear about it at once. */
class LostSignal {
  private reason: Error | undefined;
  private readonly listeners: ((reason: Error) => void)[] = [];

  on(listener: (reason: Error) => void): void {
    if (this.reason) {
      const reason = this.reason;
      queueMicrotask(() => listener(reason));
    } else {
      this.listeners.push(listener);
    }
  }

  fire(reason: Error): void {
    if (this.reason) return;
    this.reason = reason;
    for (const listener of this.listeners.splice(0)) listener(reason);
  }
}

class EtcdLease implements Lease {
  constructor(
    private readonly inner: Etcd3Lease,
    readonly id: string,
    readonly ttlSeconds: number,
    private readonly lost: LostSignal,
    private readonly store: EtcdStore,
  ) {}

  async keepAliveOnce(): Promise<void> {
    // A keep-alive is a stream call (no gRPC deadline): bound it here.
    await this.store.call(() => withTimeout(this.inner.keepaliveOnce(), STREAM_TIMEOUT_MS, 'lease keep-alive'));
  }

  async revoke(): Promise<void> {
    this.store.forgetLease(this.inner);
    await this.store.call(() => this.inner.revoke());
  }

  release(): void {
    this.store.forgetLease(this.inner);
    this.inner.release();
  }

  onLost(listener: (reason: Error) => void): void {
    this.lost.on(listener);
  }
}
