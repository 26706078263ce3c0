import t from 'tap';
import type { FastifyRequest } from 'fastify';
import { cachedConfigFor, cachedWithConfigFor, configFor, withConfigFor } from '../../src/auth/env-redaction.js';

// The directory serves its watched declarations through views redacted once per version
// (bench/auth.ts measures the read token's cost); a view must never outlive its version.

const caller = (role: 'read' | 'deploy' | 'admin' | null) =>
  ({ caller: role === null ? null : { name: role, role, hash: '', createdAt: '' } }) as unknown as FastifyRequest;
const version = (env: Record<string, string>) => ({ name: 'web', config: { numInstances: 1, env } });

t.test('a read token sees the names of a cached record with values redacted; others see the values', async (t) => {
  const record = version({ API_KEY: 's3cret', MODE: 'prod' });
  t.same(cachedWithConfigFor(caller('read'), record), { name: 'web', config: { numInstances: 1, env: { API_KEY: '(redacted)', MODE: '(redacted)' } } });
  t.same(cachedConfigFor(caller('read'), record.config), { numInstances: 1, env: { API_KEY: '(redacted)', MODE: '(redacted)' } });
  for (const role of ['deploy', 'admin', null] as const) {
    t.equal(cachedWithConfigFor(caller(role), record), record, `${role ?? 'no token'}: the record itself`);
    t.equal(cachedConfigFor(caller(role), record.config), record.config, `${role ?? 'no token'}: the config itself`);
  }
  t.same(record.config.env, { API_KEY: 's3cret', MODE: 'prod' }, 'the cached record is not changed');
  t.same(cachedWithConfigFor(caller('read'), record), withConfigFor(caller('read'), record), 'the same as the uncached view');
  t.same(cachedConfigFor(caller('read'), record.config), configFor(caller('read'), record.config));
});

t.test('the redacted view is made once per version and a new version gets its own', async (t) => {
  const first = version({ API_KEY: 'one' });
  const view = cachedWithConfigFor(caller('read'), first);
  t.equal(cachedWithConfigFor(caller('read'), first), view, 'the second read shares the first view');
  const second = version({ API_KEY: 'two', ADDED: 'x' });
  t.same(cachedWithConfigFor(caller('read'), second).config.env, { API_KEY: '(redacted)', ADDED: '(redacted)' }, 'the new version, not the old view');
  t.same(cachedConfigFor(caller('read'), second.config).env, { API_KEY: '(redacted)', ADDED: '(redacted)' });
});
