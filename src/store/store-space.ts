import { Gauge } from 'prom-client';
import { HttpError } from '../http/errors.js';
import { metricsRegistry } from '../http/metrics.js';
import type { Store } from './store.js';

// etcd refuses every write, the platform's own included (leases, unit statuses, failover), once its
// database reaches --quota-backend-bytes, and stays so until an operator compacts, defragments and
// disarms the alarm. So the platform keeps a limit of its own below that quota (--store-space-limit):
// above it, API callers' writes are refused with 507 while the platform's own small writes go on,
// and /readyz and /metrics show the store's size before it gets there (docs/configuration.md "Store space").

/** 1.5 GiB: three quarters of etcd's default quota of 2 GiB. */
export const DEFAULT_STORE_SPACE_LIMIT_BYTES = 1.5 * 1024 ** 3;
/** /readyz warns from this share of the limit on. */
const WARN_SHARE = 0.8;
/** A reading this fresh is used as it is: a burst of writes costs the store one status call a second. */
const FRESH_MS = 1000;
const POLL_MS = 10_000;

/** The process's gauge of `name`: one per process, however many StoreSpace a test makes. */
const gauge = (name: string, help: string): Gauge =>
  (metricsRegistry.getSingleMetric(name) as Gauge | undefined) ?? new Gauge({ name, help, registers: [metricsRegistry] });

const mebibytes = (bytes: number): string => `${(bytes / 1024 ** 2).toFixed(1)} MiB`;

/**
 * Made once per process; only the roles that take API callers' writes (the directory, the
 * scheduler) `watch` it, so a process of agents and gateways neither polls the store's status nor
 * serves the series.
 */
export class StoreSpace {
  private dbSizeBytes: number | undefined;
  private readAt = 0;
  private pending: Promise<number> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private dbSizeGauge: Gauge | undefined;

  constructor(
    private readonly store: Store,
    readonly limitBytes: number = DEFAULT_STORE_SPACE_LIMIT_BYTES,
  ) {}

  /** Serves the store's size and the limit on /metrics, read every 10 s. */
  watch(): void {
    if (this.timer) return;
    gauge('platform_store_space_limit_bytes', 'The store size above which API writes are refused with 507 (--store-space-limit).').set(this.limitBytes);
    this.dbSizeGauge = gauge('platform_store_db_size_bytes', "Bytes the key-value store takes on disk (etcd's dbSize; the embedded store's files), as last read by this process.");
    const poll = () => void this.read().catch(() => undefined);
    poll();
    this.timer = setInterval(poll, POLL_MS).unref();
  }

  /** The store's size now, or as read within the last second. */
  async read(): Promise<number> {
    if (this.dbSizeBytes !== undefined && Date.now() - this.readAt < FRESH_MS) return this.dbSizeBytes;
    // Concurrent callers share one status call.
    this.pending ??= this.store.dbSize().then(
      (bytes) => {
        this.dbSizeBytes = bytes;
        this.readAt = Date.now();
        this.dbSizeGauge?.set(bytes);
        return bytes;
      },
    ).finally(() => (this.pending = undefined));
    return this.pending;
  }

  /** 507 naming the store's space when it is over the limit: for writes an API caller asks for. */
  async assertRoom(): Promise<void> {
    const bytes = await this.read();
    if (bytes >= this.limitBytes) {
      throw new HttpError(
        507,
        `the key-value store's space is at ${mebibytes(bytes)}, over the platform's limit of ${mebibytes(this.limitBytes)} (--store-space-limit): ` +
          'writes are refused until an operator compacts and defragments the store (docs/configuration.md "Store space"); deletes still work',
      );
    }
  }

  /** For /readyz: the store's size and limit, with a warning from 80 % of the limit on. */
  async readiness(): Promise<Record<string, unknown>> {
    const bytes = await this.read();
    const space = { dbSizeBytes: bytes, limitBytes: this.limitBytes };
    if (bytes < this.limitBytes * WARN_SHARE) return { storeSpace: space };
    const state = bytes >= this.limitBytes ? 'over its limit: API writes are refused with 507' : 'nearing its limit';
    return { storeSpace: { ...space, warning: `the key-value store's space is ${mebibytes(bytes)}, ${state} of ${mebibytes(this.limitBytes)}` } };
  }

  close(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }
}
