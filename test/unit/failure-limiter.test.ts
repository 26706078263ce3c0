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
