import type { Operation, Store } from '../store.js';
import { journalKey, journalPrefix } from '../keys.js';
import { listRecords } from '../json-records.js';
import type { JournalEntry } from '../../schemas/release.js';
import { timeOrderedId } from '../ids.js';

/** The write of a journal entry, for a transaction that records something together with its line. */
export function journalWrite(entry: Omit<JournalEntry, 'id' | 'at'>): Operation {
  const id = timeOrderedId();
  return { op: 'put', key: journalKey(id), value: JSON.stringify({ id, at: new Date().toISOString(), ...entry }) };
}

export async function appendJournal(store: Store, entry: Omit<JournalEntry, 'id' | 'at'>): Promise<void> {
  await store.txn([], [journalWrite(entry)]);
}

/** Newest first; `before` pages back from an entry id. */
export async function readJournal(store: Store, options: { limit: number; before?: string; service?: string }): Promise<JournalEntry[]> {
  const entries = (await listRecords<JournalEntry>(store, journalPrefix)).reverse();
  return entries
    .filter((entry) => (!options.before || entry.id < options.before) && (!options.service || entry.service === options.service))
    .slice(0, options.limit);
}
