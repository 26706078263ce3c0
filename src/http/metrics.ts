import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
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
type RequestLabel = 'role' | 'method' | 'route' | 'status';
type DurationLabel = 'role' | 'route';

/**
 * A role's request series (platform_http_requests_total, platform_http_request_duration_seconds) on
 * prom-client's Counter and Histogram. prom-client hashes and checks the label set on every call,
 * a labelled child's too (about 1.5 µs a call; issue 29), so a request is counted in a plain tally
 * that the Counter takes in when it is collected, at each scrape (prom-client's `collect`). The
 * duration is observed per request: a Histogram has no way to take many observations at once.
 */
class RequestSeries {
  /** Requests answered since the last scrape, by route, method and status. */
  private readonly unscraped = new Map<string, { labels: Record<RequestLabel, string>; count: number }>();
  private readonly durations = new Map<string, Histogram.Internal<DurationLabel>>();

  constructor(
    private readonly role: string,
    private readonly requests: Counter<RequestLabel>,
    private readonly duration: Histogram<DurationLabel>,
  ) {}

  record(route: string, method: string, status: number, seconds: number): void {
    const key = `${route} ${method} ${status}`;
    const tally = this.unscraped.get(key);
    if (tally) tally.count += 1;
    else this.unscraped.set(key, { labels: { role: this.role, method, route, status: String(status) }, count: 1 });
    let duration = this.durations.get(route);
    if (!duration) this.durations.set(route, (duration = this.duration.labels(this.role, route)));
    duration.observe(seconds);
  }

  /** Adds the requests counted since the last scrape to the Counter. */
  collect(): void {
    for (const tally of this.unscraped.values()) {
      if (tally.count === 0) continue;
      this.requests.inc(tally.labels, tally.count);
      tally.count = 0;
    }
  }
}

/** One RequestSeries per role registry: a second server of a role in this process (tests) counts into the same. */
const requestSeries = new WeakMap<Registry, RequestSeries>();

export function observeRequests(server: FastifyInstance, role: string): void {
  const registry = roleRegistry(role);
  let series = requestSeries.get(registry);
  if (!series) {
    const requests = new Counter<RequestLabel>({
      name: REQUESTS,
      help: 'HTTP requests answered, by role, method, route and status.',
      labelNames: ['role', 'method', 'route', 'status'],
      registers: [registry],
      collect: () => series?.collect(),
    });
    const duration = new Histogram<DurationLabel>({ name: DURATION, help: 'HTTP request duration by role and route.', labelNames: ['role', 'route'], buckets: DURATION_BUCKETS, registers: [registry] });
    requestSeries.set(registry, (series = new RequestSeries(role, requests, duration)));
  }
  const counted = series;
  // A callback hook, not an async one (a promise and a microtask per call).
  server.addHook('onResponse', (request, reply, done) => {
    counted.record(request.routeOptions.url ?? 'unmatched', request.method, reply.statusCode, reply.elapsedTime / 1000);
    done();
  });
}
