import { Registry, collectDefaultMetrics } from 'prom-client';
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

/** One route's requests: answered by method and status, and their durations. */
interface RouteTally {
  answered: Map<string, { method: string; status: string; count: number }>;
  /** Requests per bucket (not cumulative); the last counts those above every bound. */
  buckets: number[];
  sum: number;
  count: number;
}

type SeriesValue = { metricName?: string; labels: Record<string, string | number>; value: number };

/**
 * A role's request series (platform_http_requests_total, platform_http_request_duration_seconds),
 * tallied per request with a map lookup and a few additions, and turned into Prometheus series only
 * when scraped. prom-client's own Counter and Histogram hash and validate the label set on every
 * call: about 5 % of a directory's read throughput (issue 29). The text served is the same.
 */
class RequestTallies {
  private readonly routes = new Map<string, RouteTally>();

  constructor(private readonly role: string) {}

  record(route: string, method: string, status: number, seconds: number): void {
    let tally = this.routes.get(route);
    if (!tally) this.routes.set(route, (tally = { answered: new Map(), buckets: new Array<number>(DURATION_BUCKETS.length + 1).fill(0), sum: 0, count: 0 }));
    const key = `${method} ${status}`;
    const answered = tally.answered.get(key);
    if (answered) answered.count += 1;
    else tally.answered.set(key, { method, status: String(status), count: 1 });
    let bucket = 0;
    while (bucket < DURATION_BUCKETS.length && seconds > DURATION_BUCKETS[bucket]!) bucket += 1;
    tally.buckets[bucket]! += 1;
    tally.sum += seconds;
    tally.count += 1;
  }

  requestSeries(): SeriesValue[] {
    return [...this.routes].flatMap(([route, tally]) =>
      [...tally.answered.values()].map(({ method, status, count }) => ({ labels: { role: this.role, method, route, status }, value: count })),
    );
  }

  durationSeries(name: string): SeriesValue[] {
    return [...this.routes].flatMap(([route, tally]) => {
      const labels = { role: this.role, route };
      let below = 0;
      const buckets = DURATION_BUCKETS.map((bound, index) => ({ metricName: `${name}_bucket`, labels: { ...labels, le: bound }, value: (below += tally.buckets[index]!) }));
      return [
        ...buckets,
        { metricName: `${name}_bucket`, labels: { ...labels, le: '+Inf' }, value: tally.count },
        { metricName: `${name}_sum`, labels, value: tally.sum },
        { metricName: `${name}_count`, labels, value: tally.count },
      ];
    });
  }
}

const REQUESTS = 'platform_http_requests_total';
const DURATION = 'platform_http_request_duration_seconds';

/** A series a Registry serves as it serves prom-client's own metrics (it reads name, help, type and get()). */
class TallySeries {
  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: 'counter' | 'histogram',
    readonly tallies: RequestTallies,
    private readonly values: () => SeriesValue[],
  ) {}

  get(): { name: string; help: string; type: string; values: SeriesValue[]; aggregator: string } {
    return { name: this.name, help: this.help, type: this.type, values: this.values(), aggregator: 'sum' };
  }

  reset(): void {}
}

export function observeRequests(server: FastifyInstance, role: string): void {
  const registry = roleRegistry(role);
  // One tally per role: a second server of the role in this process (tests) counts into the same.
  let tallies = (registry.getSingleMetric(REQUESTS) as unknown as TallySeries | undefined)?.tallies;
  if (!tallies) {
    const counted = (tallies = new RequestTallies(role));
    registry.registerMetric(new TallySeries(REQUESTS, 'HTTP requests answered, by role, method, route and status.', 'counter', counted, () => counted.requestSeries()) as never);
    registry.registerMetric(new TallySeries(DURATION, 'HTTP request duration by role and route.', 'histogram', counted, () => counted.durationSeries(DURATION)) as never);
  }
  const counted = tallies;
  // A callback hook, not an async one (a promise and a microtask per call).
  server.addHook('onResponse', (request, reply, done) => {
    counted.record(request.routeOptions.url ?? 'unmatched', request.method, reply.statusCode, reply.elapsedTime / 1000);
    done();
  });
}
