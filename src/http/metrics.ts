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

export function observeRequests(server: FastifyInstance, role: string): void {
  const registry = roleRegistry(role);
  // One pair per role: a second server of the role in this process (tests) counts into the same.
  const requests =
    (registry.getSingleMetric('platform_http_requests_total') as Counter<'role' | 'method' | 'route' | 'status'> | undefined) ??
    new Counter({
      name: 'platform_http_requests_total',
      help: 'HTTP requests answered, by role, method, route and status.',
      labelNames: ['role', 'method', 'route', 'status'] as const,
      registers: [registry],
    });
  const duration =
    (registry.getSingleMetric('platform_http_request_duration_seconds') as Histogram<'role' | 'route'> | undefined) ??
    new Histogram({
      name: 'platform_http_request_duration_seconds',
      help: 'HTTP request duration by role and route.',
      labelNames: ['role', 'route'] as const,
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
      registers: [registry],
    });
  // A callback hook, not an async one (a promise and a microtask per call).
  server.addHook('onResponse', (request, reply, done) => {
    const route = request.routeOptions.url ?? 'unmatched';
    requests.inc({ role, method: request.method, route, status: String(reply.statusCode) });
    duration.observe({ role, route }, reply.elapsedTime / 1000);
    done();
  });
}
