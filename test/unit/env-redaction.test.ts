import t from 'tap';
import type { FastifyRequest } from 'fastify';
import { cachedConfigFor, cachedWithConfigFor, configFor, envValuesSeenBy, withConfigFor } from '../../src/auth/env-redaction.js';

// The directory serves its watched declarations through views redacted once per version
// (bench/auth.ts measures the read token's cost); a view must never outlive its version.

const caller = (role: 'read' | 'deploy' | 'admin' | null) =>
  ({ caller: role === null ? null : { name: role, role, hash: '', createdAt: '' } }) as unknown as FastifyRequest;
const version = (env: Record<string, string>) => ({ name: 'web', config: { numInstances: 1, env } });

t.test('a read token sees the names of a cached record with values redacted; others see the values', async (t) => {
  const record = version({ API_KEY: 's3cret', MODE: 'prod' });
  t.same(cachedWithConfigFor(caller('read'), 'web', record), { name: 'web', config: { numInstances: 1, env: { API_KEY: '(redacted)', MODE: '(redacted)' } } });
  t.same(cachedConfigFor(caller('read'), 'web', record.config), { numInstances: 1, env: { API_KEY: '(redacted)', MODE: '(redacted)' } });
  for (const role of ['deploy', 'admin', null] as const) {
    t.equal(cachedWithConfigFor(caller(role), 'web', record), record, `${role ?? 'no token'}: the record itself`);
    t.equal(cachedConfigFor(caller(role), 'web', record.config), record.config, `${role ?? 'no token'}: the config itself`);
  }
  t.same(record.config.env, { API_KEY: 's3cret', MODE: 'prod' }, 'the cached record is not changed');
  t.same(cachedWithConfigFor(caller('read'), 'web', record), withConfigFor(caller('read'), 'web', record), 'the same as the uncached view');
  t.same(cachedConfigFor(caller('read'), 'web', record.config), configFor(caller('read'), 'web', record.config));
});

t.test('the redacted view is made once per version and a new version gets its own', async (t) => {
  const first = version({ API_KEY: 'one' });
  const view = cachedWithConfigFor(caller('read'), 'web', first);
  t.equal(cachedWithConfigFor(caller('read'), 'web', first), view, 'the second read shares the first view');
  const second = version({ API_KEY: 'two', ADDED: 'x' });
  t.same(cachedWithConfigFor(caller('read'), 'web', second).config.env, { API_KEY: '(redacted)', ADDED: '(redacted)' }, 'the new version, not the old view');
  t.same(cachedConfigFor(caller('read'), 'web', second.config).env, { API_KEY: '(redacted)', ADDED: '(redacted)' });
});

t.test("a deploy token scoped to other services sees the names only; one whose scope covers the service sees the values", async (t) => {
  const scoped = (services: string) => ({ caller: { name: 'ci', role: 'deploy', services, hash: '', createdAt: '' } }) as unknown as FastifyRequest;
  const record = version({ API_KEY: 's3cret' });
  t.same(withConfigFor(scoped('api-*'), 'web', record).config.env, { API_KEY: '(redacted)' }, 'scoped to api-*');
  t.same(cachedConfigFor(scoped('api-*'), 'web', record.config).env, { API_KEY: '(redacted)' });
  t.equal(withConfigFor(scoped('we*'), 'web', record), record, 'scoped to we*');
  t.equal(envValuesSeenBy(scoped('api-*'))?.('web'), false, 'the event stream redacts web for it');
  t.equal(envValuesSeenBy(scoped('api-*'))?.('api-1'), true, 'and not api-1');
  t.equal(envValuesSeenBy(caller('read'))?.('web'), false, 'a read token sees no values');
  for (const role of ['deploy', 'admin', null] as const) t.equal(envValuesSeenBy(caller(role)), undefined, `${role ?? 'no token'} sees every value`);
});
