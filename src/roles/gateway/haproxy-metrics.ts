import { Counter, Gauge } from 'prom-client';
import { roleRegistry } from '../../http/metrics.js';
import { parseStat } from './haproxy-runtime.js';

// HAProxy's own counters in the gateway's /metrics, read from `show stat` on its runtime socket
// when scraped. HAProxy counts per worker, so a reload or restart starts them again from zero
// (Prometheus' rate() treats that as a counter reset).

export interface HaproxyMetricsSource {
  up(): boolean;
  reloads(): number;
  restarts(): number;
  /** `show stat` CSV; rejects when HAProxy does not answer. */
  stat(): Promise<string>;
  /** The route a pool backend (any thread's copy of it) serves or last served; undefined for a spare. */
  route(backend: string): string | undefined;
}

let source: HaproxyMetricsSource | undefined;

/** The HAProxy data plane whose counters /metrics shows (one gateway role per process). */
export function followHaproxy(next: HaproxyMetricsSource | undefined): void {
  source = next;
}

const registers = [roleRegistry('gateway')];

new Gauge({
  name: 'platform_gateway_haproxy_up',
  help: 'Whether the HAProxy data plane answers (1) or is being restarted (0); absent with the Node data plane.',
  registers,
  collect() {
    this.reset();
    if (source) this.set(source.up() ? 1 : 0);
  },
});

new Counter({
  name: 'platform_gateway_haproxy_reloads_total',
  help: 'Seamless HAProxy reloads because the configuration had to change shape (the pool of spare backends ran dry) or HAProxy refused a command.',
  registers,
  collect() {
    this.reset();
    if (source) this.inc(source.reloads());
  },
});

new Counter({
  name: 'platform_gateway_haproxy_restarts_total',
  help: 'Times HAProxy died and the gateway started it again.',
  registers,
  collect() {
    this.reset();
    if (source) this.inc(source.restarts());
  },
});

/** The backend rows of the current scrape, shared by the series below (one `show stat` per scrape). */
let rows: Promise<Record<string, string>[]> = Promise.resolve([]);
let rowsAt = 0;
function backendRows(): Promise<Record<string, string>[]> {
  if (source === undefined) return Promise.resolve([]);
  if (Date.now() - rowsAt > 500) {
    rowsAt = Date.now();
    rows = source
      .stat()
      .then((csv) => parseStat(csv).flatMap((row) => {
        const service = row.svname === 'BACKEND' ? source?.route(row.pxname!) : undefined;
        return service === undefined ? [] : [{ ...row, service }];
      }))
      .catch(() => []);
  }
  return rows;
}


new Counter({
  name: 'platform_gateway_haproxy_responses_total',
  help: 'Responses HAProxy sent for each service, by status class (HAProxy hrsp_*).',
  labelNames: ['service', 'code'] as const,
  registers,
  async collect() {
    this.reset();
    for (const row of await backendRows()) {
      for (const code of ['1xx', '2xx', '3xx', '4xx', '5xx', 'other']) this.inc({ service: row.service!, code }, Number(row[`hrsp_${code}`]) || 0);
    }
  },
});

/** A per-service counter read from one `show stat` column (or a sum of columns) of the backend rows. */
function backendCounter(name: string, help: string, value: (row: Record<string, string>) => number): void {
  new Counter({
    name,
    help,
    labelNames: ['service'] as const,
    registers,
    async collect() {
      this.reset();
      for (const row of await backendRows()) this.inc({ service: row.service! }, value(row));
    },
  });
}

backendCounter('platform_gateway_haproxy_connection_errors_total', 'Failed connections to units, by service (HAProxy econ).', (row) => Number(row.econ) || 0);
backendCounter(
  'platform_gateway_haproxy_retries_total',
  'Requests HAProxy retried or sent to another unit after a connection failure, by service (wretr + wredis).',
  (row) => (Number(row.wretr) || 0) + (Number(row.wredis) || 0),
);

new Gauge({
  name: 'platform_gateway_haproxy_sessions',
  help: 'Requests and tunnels HAProxy has open to units now, by service (scur).',
  labelNames: ['service'] as const,
  registers,
  async collect() {
    this.reset();
    // One row per thread's copy of the service's backend (haproxy-config.ts threadBackendName).
    for (const row of await backendRows()) this.inc({ service: row.service! }, Number(row.scur) || 0);
  },
});
