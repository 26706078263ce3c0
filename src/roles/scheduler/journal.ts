import type { Store } from '../../store/store.js';
import { journalKey, journalPrefix } from '../../store/keys.js';
import { listRecords } from '../../store/json-records.js';
import type { JournalEntry } from '../../schemas/release.js';
import { timeOrderedId } from './ids.js';

export async function appendJournal(store: Store, entry: Omit<JournalEntry, 'id' | 'at'>): Promise<void> {
  const id = timeOrderedId();
  await store.put(journalKey(id), JSON.stringify({ id, at: new Date().toISOString(), ...entry }));
}

/** Newest first; `before` pages back from an entry id. */
export async function readJournal(store: Store, options: { limit: number; before?: string; service?: string }): Promise<JournalEntry[]> {
  const entries = (await listRecords<JournalEntry>(store, journalPrefix)).reverse();
  return entries
    .filter((entry) => (!options.before || entry.id < options.before) && (!options.service || entry.service === options.service))
    .slice(0, options.limit);
}
