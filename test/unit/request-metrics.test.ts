import t from 'tap';
import { createRoleServer } from '../../src/http/server.js';

// The request series every role serves (src/http/metrics.ts): plain counts per route, served as
// prom-client serves a Counter and a Histogram: the labels, cumulative buckets, sum and count.

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

t.test('each scrape serves every request answered until then, once', async (t) => {
  const server = await createRoleServer({ role: 'scraped', logger: false, access: { mode: 'none', listenerLoopback: true }, readiness: async () => ({}) });
  server.get('/things', async () => ({ ok: true }));
  t.teardown(() => server.close());
  const answered = async () =>
    Number(/\nplatform_http_requests_total\{role="scraped",method="GET",route="\/things",status="200"\} (\d+)\n/.exec((await server.inject({ method: 'GET', url: '/metrics' })).body)?.[1]);
  for (let call = 0; call < 2; call++) await server.inject({ method: 'GET', url: '/things' });
  t.equal(await answered(), 2);
  t.equal(await answered(), 2, 'a scrape with no request since adds none');
  await server.inject({ method: 'GET', url: '/things' });
  t.equal(await answered(), 3, 'the requests since the last scrape are added to those before');
});
