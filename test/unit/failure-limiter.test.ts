import t from 'tap';
import { FailureLimiter } from '../../src/auth/failure-limiter.js';

const clock = (start = 1_000_000) => {
  const time = { now: start };
  return { time, now: () => time.now };
};

t.test('an address may fail 20 times in a minute; the next call waits until the minute is over', async (t) => {
  const { time, now } = clock();
  const limiter = new FailureLimiter({ now });
  for (let i = 0; i < 20; i++) {
    t.equal(limiter.retryAfterMs('203.0.113.7'), 0, `before failure ${i + 1}`);
    limiter.recordFailure('203.0.113.7');
    time.now += 1000;
  }
  t.equal(limiter.retryAfterMs('203.0.113.7'), 40_000, 'the window opened at the first failure, 20 s ago');
  t.equal(limiter.retryAfterMs('198.51.100.1'), 0, 'other addresses are not affected');
  time.now += 39_999;
  t.equal(limiter.retryAfterMs('203.0.113.7'), 1);
  time.now += 1;
  t.equal(limiter.retryAfterMs('203.0.113.7'), 0, 'a new window opens');
  limiter.recordFailure('203.0.113.7');
  t.equal(limiter.retryAfterMs('203.0.113.7'), 0, 'with a fresh budget');
});

t.test('twenty failures spread over more than a minute never limit an address', async (t) => {
  const { time, now } = clock();
  const limiter = new FailureLimiter({ now });
  for (let i = 0; i < 100; i++) {
    limiter.recordFailure('203.0.113.7');
    t.equal(limiter.retryAfterMs('203.0.113.7'), 0);
    time.now += 3200;
  }
});

t.test('the limit and the window can be set', async (t) => {
  const { time, now } = clock();
  const limiter = new FailureLimiter({ limit: 2, windowMs: 500, now });
  limiter.recordFailure('a');
  t.equal(limiter.retryAfterMs('a'), 0);
  limiter.recordFailure('a');
  t.equal(limiter.retryAfterMs('a'), 500);
  time.now += 500;
  t.equal(limiter.retryAfterMs('a'), 0);
});

t.test('at most maxAddresses are tracked, the least recently failed dropped first', async (t) => {
  const { now } = clock();
  const limiter = new FailureLimiter({ limit: 1, maxAddresses: 3, now });
  for (const address of ['a', 'b', 'c']) limiter.recordFailure(address);
  limiter.recordFailure('a');
  limiter.recordFailure('d');
  t.equal(limiter.size, 3);
  t.equal(limiter.retryAfterMs('b'), 0, 'b failed least recently and was dropped');
  for (const address of ['a', 'c', 'd']) t.ok(limiter.retryAfterMs(address) > 0, `${address} is still limited`);
  for (let i = 0; i < 1000; i++) limiter.recordFailure(`10.0.${i >> 8}.${i & 255}`);
  t.equal(limiter.size, 3, 'a thousand addresses later, still three');
});

t.test('limitsAny says whether any address may be refused: not after a few failures, yes at the limit, no once its window ends', async (t) => {
  const { time, now } = clock();
  const limiter = new FailureLimiter({ limit: 3, windowMs: 1000, now });
  t.notOk(limiter.limitsAny(), 'nothing failed');
  limiter.recordFailure('a');
  limiter.recordFailure('b');
  limiter.recordFailure('a');
  t.notOk(limiter.limitsAny(), 'failures below the limit refuse nobody');
  time.now += 500;
  limiter.recordFailure('a');
  t.ok(limiter.limitsAny(), 'a reached the limit');
  t.ok(limiter.retryAfterMs('a') > 0);
  time.now += 499;
  t.ok(limiter.limitsAny(), "until a's window ends");
  time.now += 1;
  t.notOk(limiter.limitsAny(), "a's window opened at its first failure, 1000 ms ago");
  t.equal(limiter.retryAfterMs('a'), 0);
});

t.test('whenever some address is refused, limitsAny is true (random failures, limits and clocks)', async (t) => {
  let seed = 7;
  const random = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) % n);
  for (let run = 0; run < 50; run++) {
    const { time, now } = clock();
    const limiter = new FailureLimiter({ limit: 1 + random(4), windowMs: 100 + random(1000), maxAddresses: 2 + random(4), now });
    const addresses = ['a', 'b', 'c', 'd', 'e', 'f'];
    for (let step = 0; step < 200; step++) {
      if (random(2)) limiter.recordFailure(addresses[random(addresses.length)]!);
      time.now += random(300);
      const refused = addresses.filter((address) => limiter.retryAfterMs(address) > 0);
      if (refused.length > 0 && !limiter.limitsAny()) t.fail(`run ${run} step ${step}: ${refused.join(',')} refused, limitsAny false`);
    }
  }
  t.pass('limitsAny never missed a refused address');
});
