// One doubling back-off for every retry loop (the work queue, ACME orders, notifications, the wait
// for etcd at start, the CLI's and the dashboard's event streams): pure, so the browser's page
// imports it as the server does.

/** Past this many doublings every wait is the longest one (2 ** 40 × a millisecond is 35 years). */
const MOST_DOUBLINGS = 40;

/**
 * The wait before try number `nth` + 1 after `nth` failures in a row (1 for the first):
 * `firstMs`, twice that, four times, … never more than `maxMs`.
 */
export function doublingDelayMs(nth: number, firstMs: number, maxMs: number): number {
  return Math.min(maxMs, firstMs * 2 ** Math.min(Math.max(0, nth - 1), MOST_DOUBLINGS));
}
