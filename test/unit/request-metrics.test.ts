import t from 'tap';
import { createRoleServer } from '../../src/http/server.js';

// The request series every role serves (src/http/metrics.ts): prom-client's Counter and Histogram
// with their labelled children kept per route, method and status, served with the labels,
// cumulative buckets, sum and count.

t.test('a role serves its requests by method, route and status, and their durations by route', async (t) => {
  const server = await createRoleServer({ role: 'tallied', logger: false, access: { mode: 'none', listenerLoopback: true }, readiness: async () => ({}) });
  server.get('/things/:name', async (request, reply) => (request.params as { name: string }).name === 'missing' ? reply.status(404).send({}) : { ok: true });
  t.teardown(() => server.close());
  for (const name of ['a', 'b', 'missing']) await server.inject({ method: 'GET', url: `/things/${name}` });
  await server.inject({ method: 'GET', url: '/nowhere' });
  const text = (await server.inject({ method: 'GET', url: '/metrics' })).body;

  t.match(text, /# HELP platform_http_requests_total HTTP requests answered, by role, method, route and status\.\n# TYPE platform_http_requests_total counter\n/);
  t.match(text, /\nplatform_http_requests_total\{role="tallied",method="GET",route="\/things\/:name",status="200"\} 2\n/);
  t.match(text, /\nplatform_http_requests_total\{role="tallied",method="GET",route="\/things\/:name",status="404"\} 1\n/);
  t.match(text, /\nplatform_http_requests_total\{role="tallied",method="GET",route="unmatched",status="404"\} 1\n/);
  t.match(text, /# TYPE platform_http_request_duration_seconds histogram\n/);
  // Label order within braces carries no meaning in Prometheus' text format: read each set whole.
  const buckets = [...text.matchAll(/\nplatform_http_request_duration_seconds_bucket\{([^}]*)\} (\d+)/g)]
    .map(([, labels, count]) => ({ labels: Object.fromEntries([...labels!.matchAll(/(\w+)="([^"]*)"/g)].map(([, name, value]) => [name, value])), count: Number(count) }))
    .filter(({ labels }) => labels.role === 'tallied' && labels.route === '/things/:name');
  t.same(buckets.map(({ labels }) => labels.le), ['0.001', '0.005', '0.01', '0.05', '0.1', '0.5', '1', '5', '+Inf'], 'every bound, then +Inf');
  const counts = buckets.map(({ count }) => count);
  t.ok(counts.every((count, index) => index === 0 || count >= counts[index - 1]!), 'cumulative');
  t.equal(counts.at(-1), 3);
  t.match(text, /\nplatform_http_request_duration_seconds_count\{role="tallied",route="\/things\/:name"\} 3\n/);
  t.match(text, /\nplatform_http_request_duration_seconds_sum\{role="tallied",route="\/things\/:name"\} [0-9.e-]+\n/);
});
