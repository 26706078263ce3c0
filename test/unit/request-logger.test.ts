import t from 'tap';
import { pino } from 'pino';
import { createRoleServer } from '../../src/http/server.js';

// A request's logger (src/http/request-logger.ts) is made when the request first logs: the lines
// are those of Fastify's own per-request child (the request id, the child's bindings, the levels).

t.test('request lines carry their request id; a request that logs nothing makes no child', async (t) => {
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => lines.push(JSON.parse(line) as Record<string, unknown>) });
  let children = 0;
  const child = logger.child;
  // pino's children inherit from their parent: the count covers a request's child's own children too.
  logger.child = function (this: typeof logger, ...args: Parameters<typeof logger.child>) {
    children += 1;
    return child.apply(this, args);
  } as typeof logger.child;
  const server = await createRoleServer({ role: 'logged', logger, access: { mode: 'none', listenerLoopback: true }, readiness: async () => ({}) });
  t.teardown(() => server.close());
  server.get('/quiet', async () => ({ ok: true }));
  server.get('/talks', async (request) => {
    request.log.debug('below the level');
    request.log.warn({ a: 1 }, 'hello %s', 'there');
    request.log.child({ sub: 2 }).info('from a child');
    return { level: request.log.level };
  });

  await server.ready();
  const before = children;
  for (let call = 0; call < 3; call++) await server.inject({ method: 'GET', url: '/quiet' });
  t.equal(children, before, 'no child for requests that log nothing');
  t.same((await server.inject({ method: 'GET', url: '/talks' })).json(), { level: 'info' });
  await server.inject({ method: 'GET', url: '/nowhere' });
  const requestLines = lines.filter((line) => 'reqId' in line).map(({ level, reqId, msg, a, sub, status }) => ({ level, reqId, msg, a, sub, status }));
  t.same(requestLines, [
    { level: 40, reqId: 'req-4', msg: 'hello there', a: 1, sub: undefined, status: undefined },
    { level: 30, reqId: 'req-4', msg: 'from a child', a: undefined, sub: 2, status: undefined },
    { level: 30, reqId: 'req-5', msg: 'request rejected', a: undefined, sub: undefined, status: 404 },
  ]);
});
