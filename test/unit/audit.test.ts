import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { auditLine, describeBody } from '../../src/auth/audit.js';
import { createRoleServer } from '../../src/http/server.js';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import { readJournal } from '../../src/store/records/journal.js';
import { REDACTED, redactEnv } from '../../src/auth/env-redaction.js';

const call = (method: string, route: string, url: string, params: object, body: unknown, config: object = {}) =>
  ({ method, url, params, body, routeOptions: { url: route, config } }) as unknown as Parameters<typeof auditLine>[0];

const actor = { token: 'ci', address: '203.0.113.7' };

t.test('a config change is journaled with the names of the variables it sets and removes, never their values', async (t) => {
  const line = auditLine(call('PATCH', '/services/:name/config', '/services/web-a/config', { name: 'web-a' }, { env: { API_KEY: 's3cret-value', OLD: null }, numInstances: 2 }), actor);
  t.same(line, { kind: 'config.changed', service: 'web-a', message: 'PATCH /services/web-a/config: env API_KEY set, OLD removed; numInstances', actor });
  t.notMatch(JSON.stringify(line), /s3cret/);
});

t.test('a declaration names its service from the body; its env by names only', async (t) => {
  const line = auditLine(call('POST', '/services', '/services', {}, { name: 'db', containerImage: 'img', env: { PASSWORD: 'hunter2' } }), actor);
  t.match(line, { kind: 'service.declared', service: 'db', message: 'POST /services: name; containerImage; env PASSWORD set' });
  t.notMatch(JSON.stringify(line), /hunter2/);
});

t.test('a token creation names the token, its role and scope; a revocation names it by its path', async (t) => {
  t.match(auditLine(call('POST', '/tokens', '/tokens', {}, { name: 'ci', role: 'deploy', services: 'web-*', expiresIn: '30d' }), actor), {
    kind: 'token.created',
    message: 'POST /tokens: token ci (deploy, services web-*, expires in 30d)',
  });
  const revoked = auditLine(call('DELETE', '/tokens/:name', '/tokens/ci', { name: 'ci' }, undefined), actor);
  t.same(revoked, { kind: 'token.revoked', message: 'DELETE /tokens/ci', actor }, 'a token name is no service');
});

t.test("an unlisted change gets a kind from its route and the service its access names; a query string is left out", async (t) => {
  t.same(auditLine(call('POST', '/services/:name/restart', '/services/web-a/restart?x=secret', { name: 'web-a' }, undefined, { service: { param: 'name' } }), actor), {
    kind: 'api.POST /services/:name/restart',
    service: 'web-a',
    message: 'POST /services/web-a/restart',
    actor,
  });
  t.equal(describeBody({ env: {} }), 'env unchanged');
  t.equal(describeBody('text'), '');
});

t.test('redacted env keeps the names', async (t) => {
  t.same(redactEnv({ A: '1', B: '' }), { A: REDACTED, B: REDACTED });
});

t.test('a role server given a journal journals a change on any route, however early the route is registered', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'audit-routes-'));
  const store = await EmbeddedStore.open(dir);
  const server = await createRoleServer({ role: 'audited', logger: false, access: { mode: 'none', listenerLoopback: true }, readiness: async () => ({}), journal: store });
  t.teardown(async () => {
    await server.close();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  // The first routes the role registers, as a role's start does right after createRoleServer.
  server.post('/things', async () => ({ made: true }));
  server.delete('/things/:name', async () => ({ removed: true }));
  server.get('/things', async () => []);
  for (const [method, url] of [['POST', '/things'], ['DELETE', '/things/a'], ['GET', '/things']] as const) t.equal((await server.inject({ method, url })).statusCode, 200);
  const lines = await readJournal(store, { limit: 10 });
  t.same(lines.map((line) => line.kind).sort(), ['api.DELETE /things/:name', 'api.POST /things'], 'each change once, no read');
});
