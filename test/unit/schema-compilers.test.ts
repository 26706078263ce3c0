import t, { type Test } from 'tap';
import { Type, type TSchema } from '@sinclair/typebox';
import { Ajv } from 'ajv';
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler';
import { buildAjv, createRoleServer } from '../../src/http/server.js';
import { serializersOnFirstUse, validatorOnFirstUse } from '../../src/http/schema-compilers.js';
import { orchestratorApi } from '../../src/schemas/api.js';

// A role server compiles a route's validators and serializers when the route is first called, not
// at start (issue 29: an idle role held every route's compiled schemas, about eight a route). What
// a call gets is what it got when they were compiled at start.

/** Counts Ajv compilations in this process, whichever instance makes them. */
function countCompilations(t: Test): { count: number } {
  const counter = { count: 0 };
  const compile = Ajv.prototype.compile;
  Ajv.prototype.compile = function (this: Ajv, ...args: Parameters<Ajv['compile']>) {
    counter.count += 1;
    return compile.apply(this, args);
  } as Ajv['compile'];
  t.teardown(() => {
    Ajv.prototype.compile = compile;
  });
  return counter;
}

const Thing = Type.Object({ units: Type.Integer({ minimum: 1 }), label: Type.Optional(Type.String()) }, { additionalProperties: false });

t.test('a role server compiles no validator at start, and a route\'s on its first call', async (t) => {
  const compilations = countCompilations(t);
  const server = await createRoleServer({ role: 'directory', logger: false, access: { mode: 'none', listenerLoopback: true }, readiness: async () => ({}) });
  server.put(
    '/things/:name',
    {
      schema: { params: Type.Object({ name: Type.String({ pattern: '^[a-z]+$' }) }), querystring: Type.Object({ times: Type.Integer({ default: 1 }) }), body: Thing, response: { 200: Thing } },
      config: { access: 'open' },
    },
    async (request) => ({ ...request.body, units: request.body.units * request.query.times, secret: 'not in the schema' }),
  );
  await server.ready();
  t.teardown(() => server.close());
  t.equal(compilations.count, 0, 'nothing compiled by ready()');

  const put = (url: string, payload: unknown) => server.inject({ method: 'PUT', url, payload: payload as object });
  const answered = await put('/things/box?times=3', { units: 2, label: 'a' });
  t.equal(answered.statusCode, 200);
  t.same(answered.json(), { units: 6, label: 'a' }, 'the query coerced to its type, and the reply cut to its schema');
  t.equal(compilations.count, 3, 'the route\'s params, query and body validators, once each');
  t.same((await put('/things/box', { units: 2 })).json(), { units: 2 }, 'a default filled in');

  const refused = await put('/things/box', { units: 0 });
  t.equal(refused.statusCode, 400);
  t.match(refused.json().message, /units/, 'the message names the field');
  t.match((await put('/things/box', { units: 1, extra: true })).json(), { statusCode: 400, message: /extra/ }, 'an unknown field is named');
  t.equal((await put('/things/BOX', { units: 1 })).statusCode, 400, 'the params are checked');
  t.equal(compilations.count, 3, 'nothing compiled twice');
});

t.test('a validator compiled on first use answers as Ajv\'s own, errors included', async (t) => {
  const lazy = validatorOnFirstUse(buildAjv(false), Thing);
  const eager = buildAjv(false).compile(Thing);
  for (const value of [{ units: 1 }, { units: 0 }, { units: 1, extra: 1 }, 'text', null]) {
    t.equal(lazy(value), eager(value), JSON.stringify(value));
    t.same(lazy.errors, eager.errors, `errors of ${JSON.stringify(value)}`);
  }
});

t.test('a serializer is built on its first call and writes what fast-json-stringify writes', async (t) => {
  const route = { method: 'GET', url: '/things', httpStatus: '200' };
  const lazy = serializersOnFirstUse()(undefined, {})({ ...route, schema: Thing });
  const eager = SerializerSelector()(undefined, {})({ ...route, schema: Thing });
  t.equal(lazy({ units: 2, label: 'b', secret: 'x' }), eager({ units: 2, label: 'b', secret: 'x' }));
  const broken = serializersOnFirstUse()(undefined, {})({ ...route, schema: { $ref: '#/nowhere' } });
  t.throws(() => broken({}), 'a schema that cannot be built fails when it is first used, not before');
});

// Compiled later, a broken schema would fail its route's first call rather than the start: every
// schema of the orchestrator's API table (most of the platform's routes) is compiled here.
t.test('every schema of the orchestrator\'s API compiles', async (t) => {
  const validators = { body: buildAjv(false), text: buildAjv(true) };
  const serializers = SerializerSelector()(undefined, {});
  for (const [key, route] of Object.entries(orchestratorApi) as [string, Record<string, unknown> & { response: Record<number, unknown> }][]) {
    for (const part of ['params', 'querystring', 'body'] as const) {
      if (route[part]) t.doesNotThrow(() => (part === 'body' ? validators.body : validators.text).compile(route[part] as TSchema), `${key} ${part}`);
    }
    for (const [status, response] of Object.entries(route.response)) {
      const content = (response as { content?: Record<string, { schema: TSchema }> }).content;
      const schemas = content ? Object.values(content).map((entry) => entry.schema) : [response];
      for (const schema of schemas) t.doesNotThrow(() => serializers({ method: 'GET', url: key, httpStatus: status, schema }), `${key} ${status}`);
    }
  }
});
