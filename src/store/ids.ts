import { randomBytes } from 'node:crypto';

/** The millisecond of the last id made here: ids made in the same millisecond take the next ones. */
let lastMs = 0;

const idPattern = /^([0-9a-z]{9})-[0-9a-f]{8}$/;

/** The time an id was made, if it is one of these ids and from no later than a day ahead (else it is a stray key, not a clock ahead). */
export function idTime(id: string): number | undefined {
  const match = idPattern.exec(id);
  if (!match) return undefined;
  const ms = Number.parseInt(match[1]!, 36);
  return ms <= Date.now() + 86_400_000 ? ms : undefined;
}

/**
 * Ids made from now on sort after `id` (one made by an earlier leader), even if this machine's
 * clock is behind that leader's: a stop or deployment recorded now must sort as the newest.
 * A key that is not such an id changes nothing.
 */
export function sortAfter(id: string): void {
  const ms = idTime(id);
  if (ms !== undefined) lastMs = Math.max(lastMs, ms);
}

/**
 * Time-ordered ids: key order in the store is creation order. Strictly increasing within the
 * process (the leading scheduler makes them all), so records created in one millisecond, like
 * deployments of concurrent triggers, still sort in the order they were made.
 */
export const timeOrderedId = (): string => {
  lastMs = Math.max(Date.now(), lastMs + 1);
  return `${lastMs.toString(36).padStart(9, '0')}-${randomBytes(4).toString('hex')}`;
};
