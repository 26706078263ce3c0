import t from 'tap';
import { Type } from '@sinclair/typebox';
import { createRoleServer } from '../../src/http/server.js';

// A JSON body is read as UTF-8. One labelled with another charset would be read as something its
// sender did not write, so it is refused (415) before it is parsed; the hostile-input fuzz
// (test/integration/fuzz.test.ts) sends such bodies and counts on that.

const server = await createRoleServer({ role: 'directory', logger: false, access: { mode: 'none', listenerLoopback: true }, readiness: async () => ({}) });
let stored = 0;
server.put('/things/:name', { schema: { body: Type.Object({ units: Type.Integer() }, { additionalProperties: false }) }, config: { access: 'open' } }, async () => {
  stored += 1;
  return { ok: true };
});
await server.ready();
t.teardown(() => server.close());

const put = (contentType: string) =>
  server.inject({ method: 'PUT', url: '/things/m-1', headers: { 'content-type': contentType }, payload: '{"units":5}' });

t.test('a JSON body labelled with a charset other than UTF-8 is a 415 naming the rule, and nothing is done', async (t) => {
  for (const contentType of ['application/json; charset=utf-16', 'application/json;charset=ISO-8859-1', 'application/json; charset="utf-32"']) {
    const reply = await put(contentType);
    t.equal(reply.statusCode, 415, contentType);
    t.match(reply.json(), { statusCode: 415, message: /content-type.*UTF-8/ }, contentType);
  }
  t.equal(stored, 0);
});

t.test('UTF-8, its aliases and no charset at all are read as they always were', async (t) => {
  for (const contentType of ['application/json', 'application/json; charset=utf-8', 'application/json; charset=UTF8', 'application/json; charset="utf-8"', 'application/json; charset=us-ascii']) {
    t.equal((await put(contentType)).statusCode, 200, contentType);
  }
});
