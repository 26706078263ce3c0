import type { AcmeStatus } from '../../schemas/certificate.js';
import type { CertificateEntry } from '../certificate-set.js';
import { doublingDelayMs } from '../../doubling-delay.js';

// When a gateway should order a host's certificate from ACME: pure, so the rules read in one place.
// - a host an operator's certificate serves (its own or a wildcard) is left alone;
// - a host without a certificate is ordered at once, an ACME one at two thirds of its lifetime;
// - after a failure, not before the status's next attempt (backoff).

/** First retry after a failure; doubled per failure in a row, up to MAX_RETRY_MS. */
export const FIRST_RETRY_MS = 30_000;
export const MAX_RETRY_MS = 3_600_000;

export const renewAt = (entry: Pick<CertificateEntry, 'notBefore' | 'notAfter'>): number => entry.notBefore + ((entry.notAfter - entry.notBefore) * 2) / 3;

/** The wait after `failures` failed orders in a row (1 or more). */
export const retryDelayMs = (failures: number): number => doublingDelayMs(failures, FIRST_RETRY_MS, MAX_RETRY_MS);

/** When the host should next be ordered (ms since the epoch); Infinity: never by ACME. */
export function orderDueAt(serving: CertificateEntry | undefined, status: AcmeStatus | undefined): number {
  if (serving?.source === 'operator') return Infinity;
  const renewal = serving === undefined ? 0 : renewAt(serving);
  const retry = status?.state === 'failed' && status.nextAttemptAt !== undefined ? Date.parse(status.nextAttemptAt) : 0;
  return Math.max(renewal, retry);
}
