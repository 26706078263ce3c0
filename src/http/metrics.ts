import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { FastifyInstance } from 'fastify';

// One registry per process: with `platform up` every role shares it, told apart by the `role` label.
export const metricsRegistry = new Registry();
collectDefaultMetrics({ register: metricsRegistry });

const requests = new Counter({
  name: 'platform_http_requests_total',
  help: 'HTTP requests answered, by role, method, route and status.',
  labelNames: ['role', 'method', 'route', 'status'] as const,
  registers: [metricsRegistry],
});

const duration = new Histogram({
  name: 'platform_http_request_duration_seconds',
  help: 'HTTP request duration by role and route.',
  labelNames: ['role', 'route'] as const,
  buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
  registers: [metricsRegistry],
});

export function observeRequests(server: FastifyInstance, role: string): void {
  server.addHook('onResponse', async (request, reply) => {
    const route = request.routeOptions.url ?? 'unmatched';
    requests.inc({ role, method: request.method, route, status: String(reply.statusCode) });
    duration.observe({ role, route }, reply.elapsedTime / 1000);
  });
}
