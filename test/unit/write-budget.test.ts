import t from 'tap';
import type { FastifyRequest } from 'fastify';
import { ConfigError, resolveConfig } from '../../src/config.js';
import { DEFAULT_WRITE_BUDGET, WriteBudget } from '../../src/auth/write-budget.js';
import { DEFAULT_STORE_SPACE_LIMIT_BYTES } from '../../src/store/store-space.js';
import { HttpError } from '../../src/http/errors.js';
import type { TokenRecord } from '../../src/schemas/token.js';

// What one token's calls may make the store keep (audit H5): a token bucket per token, refilled
// evenly over the window; calls without a token (the operator's) are not counted.

const KiB = 1024;
const token = (name: string): TokenRecord => ({ name, role: 'deploy', createdAt: '2026-11-26T00:00:00.000Z', hash: 'h' });
const callBy = (caller: TokenRecord | 'local' | null) => ({ caller }) as FastifyRequest;
/** The refusal `charge` throws, or undefined when it admits the write. */
const refusal = (charge: () => void): HttpError | undefined => {
  try {
    charge();
    return undefined;
  } catch (error) {
    return error as HttpError;
  }
};

t.test('a token spends its budget, is refused with 429 naming it and when to retry, and gets it back over the window', async (t) => {
  let now = 0;
  const budget = new WriteBudget({ bytes: 100 * KiB, windowMs: 100_000, now: () => now });
  const ci = callBy(token('ci'));
  for (let i = 0; i < 10; i++) budget.charge(ci, 10 * KiB);
  const refused = refusal(() => budget.charge(ci, 10 * KiB));
  t.equal(refused?.statusCode, 429);
  t.equal(refused?.retryAfterSeconds, 10, '10 KiB of 100 KiB per 100 s come back in 10 s');
  t.match(refused?.message, 'token ci is over its write budget of 100 KiB per 100 s (--write-budget): this change writes 10 KiB and 0 KiB is left');
  now = 5_000;
  t.match(refusal(() => budget.charge(ci, 10 * KiB)), { statusCode: 429, retryAfterSeconds: 5 }, 'a refusal takes nothing');
  now = 10_000;
  budget.charge(ci, 10 * KiB);
  t.pass('after the wait the write is admitted');
});

t.test('each token has its own budget; tiny writes cost 1 KiB; calls without a token are never counted', async (t) => {
  const budget = new WriteBudget({ bytes: 10 * KiB, windowMs: 60_000, now: () => 0 });
  for (let i = 0; i < 10; i++) budget.charge(callBy(token('a')), 1);
  t.match(refusal(() => budget.charge(callBy(token('a')), 1)), { statusCode: 429 }, 'ten writes of 1 byte spent 10 KiB');
  budget.charge(callBy(token('b')), 10 * KiB);
  for (let i = 0; i < 100; i++) {
    budget.charge(callBy('local'), 10 * KiB);
    budget.charge(callBy(null), 10 * KiB);
  }
  t.pass('the operator (local under auto, --auth none) writes without a budget');
});

t.test('--write-budget, --write-budget-window and --store-space-limit, by flag or environment, with their defaults', async (t) => {
  const defaults = resolveConfig({}, {});
  t.same(defaults.writeBudget, { bytes: 64 * KiB * KiB, windowMs: 3_600_000 });
  t.same(defaults.writeBudget, { bytes: DEFAULT_WRITE_BUDGET.bytes, windowMs: DEFAULT_WRITE_BUDGET.windowMs });
  t.equal(defaults.storeSpaceLimitBytes, DEFAULT_STORE_SPACE_LIMIT_BYTES);
  t.equal(DEFAULT_STORE_SPACE_LIMIT_BYTES, 1536 * KiB * KiB, "three quarters of etcd's default quota");
  const set = resolveConfig({ writeBudget: '8m', writeBudgetWindow: '10m', storeSpaceLimit: '6g' }, {});
  t.same(set.writeBudget, { bytes: 8 * KiB * KiB, windowMs: 600_000 });
  t.equal(set.storeSpaceLimitBytes, 6 * KiB ** 3);
  const env = resolveConfig({}, { PLATFORM_WRITE_BUDGET: '512k', PLATFORM_WRITE_BUDGET_WINDOW: '1d', PLATFORM_STORE_SPACE_LIMIT: '100m' });
  t.same(env.writeBudget, { bytes: 512 * KiB, windowMs: 86_400_000 });
  t.equal(env.storeSpaceLimitBytes, 100 * KiB * KiB);
  for (const size of ['1x', '-1m', '1.5m', '10 m', '10k']) {
    t.throws(() => resolveConfig({ storeSpaceLimit: size }, {}), new ConfigError(`--store-space-limit must be a size such as 512m: a whole number of bytes, or of k, m or g, at least 1048576, got ${size}`), size);
  }
  t.throws(
    () => resolveConfig({ writeBudgetWindow: 'soon' }, {}),
    new ConfigError('--write-budget-window: a duration is a number and a unit (s, m, h, d, w), such as 90d or 1w2d, got "soon"'),
  );
});
