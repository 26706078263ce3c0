import { Registry, collectDefaultMetrics, type Metric } from 'prom-client';
import type { FastifyInstance } from 'fastify';

// Prometheus series, each served once per process. A process may run several roles, each on its
// own port (`platform up`), and a scraper of every port must not see one series twice:
// - the process's series (Node's default metrics, store reads) are in `metricsRegistry`, served by
//   one role's /metrics: the first role server of the process to start (`claimProcessSeries`);
// - a role's own series (its HTTP requests, the orchestrator's event streams, the gateway's
//   traffic) are in that role's registry (`roleRegistry`), served by that role's /metrics.

export const metricsRegistry = new Registry();
collectDefaultMetrics({ register: metricsRegistry });
// prom-client sums active handles, requests and resources into gauges ending in _total, a suffix
// Prometheus keeps for counters (promtool check metrics refuses them). The same numbers by type
// stay: nodejs_active_handles, nodejs_active_requests, nodejs_active_resources.
for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) metricsRegistry.removeSingleMetric(name);

const roleRegistries = new Map<string, Registry>();

/** The registry of one role's own series. */
export function roleRegistry(role: string): Registry {
  let registry = roleRegistries.get(role);
  if (!registry) roleRegistries.set(role, (registry = new Registry()));
  return registry;
}

/** The role server that serves the process's series, while it runs. */
let processSeriesOwner: object | undefined;

/** Makes `server` the one that serves the process's series, unless another running one does. */
export function claimProcessSeries(server: FastifyInstance): void {
  processSeriesOwner ??= server;
  server.addHook('onClose', async () => {
    if (processSeriesOwner === server) processSeriesOwner = undefined;
  });
}

/** What GET /metrics of this role server answers: its role's series, and the process's if it serves them. */
export function metricsOf(server: FastifyInstance, role: string): Promise<string> {
  processSeriesOwner ??= server;
  return Registry.merge([roleRegistry(role), ...(processSeriesOwner === server ? [metricsRegistry] : [])]).metrics();
}

export const metricsContentType = metricsRegistry.contentType;

/** The request duration histogram's upper bounds, in seconds. */
const DURATION_BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5];

const REQUESTS = 'platform_http_requests_total';
const DURATION = 'platform_http_request_duration_seconds';

/** One route's requests: counts by method and status, and the durations' buckets, count and sum. */
interface RouteTally {
  route: string;
  byMethod: Map<string, Map<number, number>>;
  /** Requests per DURATION_BUCKETS bound (not cumulative), the last for those above every bound. */
  buckets: number[];
  count: number;
  sum: number;
}

type Sample = { metricName?: string; labels: Record<string, string | number>; sharedLabels?: Record<string, string>; value: number };

/**
 * A role's request series (platform_http_requests_total, platform_http_request_duration_seconds)
 * as plain counts per route, turned into series when scraped, as the gateway's are
 * (src/roles/gateway/gateway-metrics.ts). prom-client's Counter and Histogram hash and check the
 * label set on every call, a labelled child's too: the histogram's observe alone was the largest
 * item of a directory read's own CPU (issue 29). The text served is the same as theirs: the same
 * names, help, labels in the same order, cumulative buckets ending in +Inf, then _sum and _count.
 */
class RequestSeries {
  private readonly routes = new Map<string, RouteTally>();

  constructor(private readonly role: string) {}

  record(route: string, method: string, status: number, seconds: number): void {
    let tally = this.routes.get(route);
    if (tally === undefined) {
      tally = { route, byMethod: new Map(), buckets: new Array<number>(DURATION_BUCKETS.length + 1).fill(0), count: 0, sum: 0 };
      this.routes.set(route, tally);
    }
    let byStatus = tally.byMethod.get(method);
    if (byStatus === undefined) tally.byMethod.set(method, (byStatus = new Map()));
    byStatus.set(status, (byStatus.get(status) ?? 0) + 1);
    let bucket = 0;
    while (bucket < DURATION_BUCKETS.length && seconds > DURATION_BUCKETS[bucket]!) bucket += 1;
    tally.buckets[bucket]! += 1;
    tally.count += 1;
    tally.sum += seconds;
  }

  /** The counter's samples, as prom-client's Counter gives them (labels role, method, route, status). */
  requests(): Sample[] {
    const samples: Sample[] = [];
    for (const { route, byMethod } of this.routes.values()) {
      for (const [method, byStatus] of byMethod) {
        for (const [status, count] of byStatus) samples.push({ labels: { role: this.role, method, route, status: String(status) }, value: count });
      }
    }
    return samples;
  }

  /** The histogram's samples, as prom-client's Histogram gives them: `le` first, then the series' labels. */
  durations(): Sample[] {
    const samples: Sample[] = [];
    for (const { route, buckets, count, sum } of this.routes.values()) {
      const labels = { role: this.role, route };
      let cumulative = 0;
      buckets.forEach((inBucket, index) => {
        cumulative += inBucket;
        samples.push({ metricName: `${DURATION}_bucket`, labels: { le: DURATION_BUCKETS[index] ?? '+Inf' }, sharedLabels: labels, value: cumulative });
      });
      samples.push({ metricName: `${DURATION}_sum`, labels, value: sum });
      samples.push({ metricName: `${DURATION}_count`, labels, value: count });
    }
    return samples;
  }
}

/** A series prom-client's Registry serves as it serves its own metrics (it reads name, help, type and get()). */
const seriesMetric = (name: string, help: string, type: 'counter' | 'histogram', values: () => Sample[]): Metric => {
  const metric = {
    name,
    help,
    type,
    aggregator: 'sum',
    get: () => ({ name, help, type, aggregator: 'sum', values: values() }),
    reset: () => undefined,
  };
  return metric as unknown as Metric;
};

/** One RequestSeries per role registry: a second server of a role in this process (tests) counts into the same. */
const requestSeries = new WeakMap<Registry, RequestSeries>();

export function observeRequests(server: FastifyInstance, role: string): void {
  const registry = roleRegistry(role);
  let series = requestSeries.get(registry);
  if (!series) {
    const created = (series = new RequestSeries(role));
    registry.registerMetric(seriesMetric(REQUESTS, 'HTTP requests answered, by role, method, route and status.', 'counter', () => created.requests()));
    registry.registerMetric(seriesMetric(DURATION, 'HTTP request duration by role and route.', 'histogram', () => created.durations()));
    requestSeries.set(registry, series);
  }
  const counted = series;
  // A callback hook, not an async one (a promise and a microtask per call).
  server.addHook('onResponse', (request, reply, done) => {
    counted.record(request.routeOptions.url ?? 'unmatched', request.method, reply.statusCode, reply.elapsedTime / 1000);
    done();
  });
}
