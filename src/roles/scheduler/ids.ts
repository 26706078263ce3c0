import { randomBytes } from 'node:crypto';

/** The millisecond of the last id made here: ids made in the same millisecond take the next ones. */
let lastMs = 0;

/**
 * Time-ordered ids: key order in the store is creation order. Strictly increasing within the
 * process (the leading scheduler makes them all), so records created in one millisecond, like
 * deployments of concurrent triggers, still sort in the order they were made.
 */
export const timeOrderedId = (): string => {
  lastMs = Math.max(Date.now(), lastMs + 1);
  return `${lastMs.toString(36).padStart(9, '0')}-${randomBytes(4).toString('hex')}`;
};
