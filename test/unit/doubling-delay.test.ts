import t from 'tap';
import { doublingDelayMs } from '../../src/doubling-delay.js';

t.test('the first wait, then doubled per failure, never over the longest', async (t) => {
  t.same([1, 2, 3, 4, 5, 6].map((nth) => doublingDelayMs(nth, 250, 5_000)), [250, 500, 1_000, 2_000, 4_000, 5_000]);
});

t.test('no failure yet waits the first wait; a thousand failures wait the longest, a finite number', async (t) => {
  t.equal(doublingDelayMs(0, 250, 5_000), 250);
  t.equal(doublingDelayMs(1_000, 10_000, 3_600_000), 3_600_000);
  t.equal(doublingDelayMs(1_000, 10_000, Number.MAX_SAFE_INTEGER * 4), 10_000 * 2 ** 40, 'at most 40 doublings');
});
