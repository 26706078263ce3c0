// When a delivery that failed is tried again, and when it is given up: exponential backoff from
// `firstRetryMs`, doubling, capped at `maxRetryMs`, with jitter (half the delay fixed, half random:
// the "equal jitter" of AWS's backoff note) so endpoints that come back are not hit by every
// pending delivery at once; given up once the next try would fall beyond `giveUpAfterMs` from the
// delivery's creation (24 hours by default, as GitHub and Stripe keep trying for days, not weeks).

import { doublingDelayMs } from '../doubling-delay.js';

export interface RetryPolicy {
  firstRetryMs: number;
  maxRetryMs: number;
  giveUpAfterMs: number;
}

export const defaultRetryPolicy: RetryPolicy = { firstRetryMs: 10_000, maxRetryMs: 3_600_000, giveUpAfterMs: 24 * 3_600_000 };

/** The wait after the `attempts`-th failed attempt (1 for the first). `random` is in [0, 1). */
export function retryDelayMs(policy: RetryPolicy, attempts: number, random: number): number {
  const full = doublingDelayMs(attempts, policy.firstRetryMs, policy.maxRetryMs);
  return Math.round(full / 2 + (full / 2) * random);
}

/** After a failed attempt: when to try again, or undefined when the delivery is given up. */
export function nextAttemptAt(policy: RetryPolicy, createdAt: number, attempts: number, now: number, random = Math.random()): number | undefined {
  const at = now + retryDelayMs(policy, attempts, random);
  return at - createdAt > policy.giveUpAfterMs ? undefined : at;
}
