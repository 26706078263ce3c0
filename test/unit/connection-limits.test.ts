import t from 'tap';
import { PassThrough } from 'node:stream';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { ConfigError, resolveConfig } from '../../src/config.js';
import { apiConnectionLimits, defaultConnectionLimits, gatewayConnectionLimits } from '../../src/http/connection-limits.js';
import { createRoleServer } from '../../src/http/server.js';
import { StreamLimit } from '../../src/http/stream-limit.js';

// The timeouts and caps every role server gets (src/http/connection-limits.ts), from the flags, and
// the idle timeout sparing long-lived streams (src/http/stream-limit.ts).
// test/integration/slow-clients.test.ts sees them hit on real roles.

t.test('without flags every API role gets the documented defaults, the gateway a 5-minute request timeout', async (t) => {
  const config = resolveConfig({}, {});
  t.same(apiConnectionLimits(config.http), {
    headersTimeoutMs: 10_000,
    requestTimeoutMs: 30_000,
    idleTimeoutMs: 120_000,
    keepAliveTimeoutMs: 72_000,
    maxConnections: 2048,
    maxConnectionsPerAddress: 256,
  });
  t.same(apiConnectionLimits(config.http), defaultConnectionLimits, 'a role server built without limits gets the same');
  t.match(gatewayConnectionLimits(config.http, config.gateway.idleTimeoutSeconds * 1000), {
    headersTimeoutMs: 10_000,
    requestTimeoutMs: 300_000,
    idleTimeoutMs: 0,
    keepAliveTimeoutMs: 60_000,
    maxConnections: 2048,
    maxConnectionsPerAddress: 256,
  });
});

t.test('the flags set every role alike; the whole request is never given less time than its head', async (t) => {
  const http = resolveConfig({ headersTimeout: '3', bodyTimeout: '4', maxConnections: '8', maxConnectionsPerAddress: '5' }, {}).http;
  t.match(apiConnectionLimits(http), { headersTimeoutMs: 3_000, requestTimeoutMs: 4_000, maxConnections: 8, maxConnectionsPerAddress: 5 });
  t.match(gatewayConnectionLimits(http, 60_000), { headersTimeoutMs: 3_000, requestTimeoutMs: 4_000, maxConnections: 8, maxConnectionsPerAddress: 5 });
  t.match(apiConnectionLimits(resolveConfig({ headersTimeout: '60' }, {}).http), { headersTimeoutMs: 60_000, requestTimeoutMs: 60_000 });
  t.throws(() => resolveConfig({ headersTimeout: '10', bodyTimeout: '5' }, {}), new ConfigError('--body-timeout (5) must be at least --headers-timeout (10): it covers the head too'));
  t.throws(() => resolveConfig({ maxConnectionsPerAddress: '0' }, {}), /--max-connections-per-address must be an integer from 1/);
  t.throws(() => resolveConfig({ headersTimeout: 'soon' }, {}), /--headers-timeout must be an integer from 1 to 3600, got soon/);
});

t.test('the idle timeout closes a silent response, but not a stream admitted by a StreamLimit, which is capped', async (t) => {
  const server = await createRoleServer({
    role: 'test',
    logger: false,
    access: { mode: 'none', listenerLoopback: true },
    readiness: async () => ({}),
    limits: { ...defaultConnectionLimits, idleTimeoutMs: 300 },
  });
  const streams = new StreamLimit('test streams', 1);
  const quietFor = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
  server.get('/silent', async () => {
    await quietFor(1_000);
    return { late: true };
  });
  server.get('/stream', async (_request, reply) => {
    streams.admit(reply);
    const body = new PassThrough();
    body.write('first\n');
    setTimeout(() => body.end('after a silence\n'), 1_000);
    return reply.type('text/plain').send(body);
  });
  await server.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(() => server.close());
  const base = `http://127.0.0.1:${(server.server.address() as AddressInfo).port}`;

  await t.rejects(request(`${base}/silent`).then((reply) => reply.body.text()), 'a handler silent past the idle timeout loses its connection');

  const first = request(`${base}/stream`).then(async (reply) => ({ status: reply.statusCode, text: await reply.body.text() }));
  await quietFor(100);
  const second = await request(`${base}/stream`);
  t.equal(second.statusCode, 503);
  t.equal(second.headers['retry-after'], '5');
  t.match(((await second.body.json()) as { message: string }).message, 'too many test streams: at most 1 are served at once');
  t.same(await first, { status: 200, text: 'first\nafter a silence\n' }, 'the stream outlived the idle timeout');
  t.equal(streams.count, 0, 'an ended stream is no longer counted');
});
