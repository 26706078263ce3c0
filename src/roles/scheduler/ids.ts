import { randomBytes } from 'node:crypto';

/** The millisecond of the last id made here: ids made in the same millisecond take the next ones. */
let lastMs = 0;

/**
 * Time-ordered ids: key order in the store is creation order. Strictly increasing within the
 * process (the leading scheduler makes them all), so records created in one millisecond, like
 * deployments of concurrent triggers, still sort in the order they were made.
 */
/**
 * Ids made from now on sort after `id` (one made by an earlier leader), even if this machine's
 * clock is behind that leader's: a stop or deployment recorded now must sort as the newest.
 */
export function sortAfter(id: string): void {
  const ms = Number.parseInt(id.slice(0, id.indexOf('-')), 36);
  if (Number.isSafeInteger(ms)) lastMs = Math.max(lastMs, ms);
}

export const timeOrderedId = (): string => {
  lastMs = Math.max(Date.now(), lastMs + 1);
  return `${lastMs.toString(36).padStart(9, '0')}-${randomBytes(4).toString('hex')}`;
};
