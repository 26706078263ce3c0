import { randomBytes } from 'node:crypto';

/** Time-ordered ids: key order in the store is creation order. */
export const timeOrderedId = (): string => `${Date.now().toString(36).padStart(9, '0')}-${randomBytes(4).toString('hex')}`;
