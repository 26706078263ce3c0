import { machinePrefix, ROOT } from '../store/keys.js';
import type { Store } from '../store/store.js';
import { platformVersion } from '../platform-version.js';
import type { BackupManifest } from '../schemas/backup.js';
import { encodeBackup } from './backup-file.js';
import { writeFileDurably } from '../atomic-file.js';

// `platform backup create`: every key under /platform/ read at one store revision, less the keys
// held under a lease. Those (announcements, unit statuses, the scheduler's leadership, ACME locks
// and challenges, handled webhook deliveries) belong to live processes: they vanish a TTL after
// their owner stops, and the owners write them again on the store they find, so a restored copy
// would only announce addresses that may be gone. Machine registrations are the exception: kept,
// and restored under a short lease (restore-backup.ts), so that a scheduler starting on the
// restored store does not take the machines for lost, and move their running units, in the
// seconds before their agents register again.

export interface TakenBackup {
  text: string;
  manifest: BackupManifest;
  /** Leased keys left out. */
  leasedLeftOut: number;
}

export async function takeBackup(store: Store, now = new Date()): Promise<TakenBackup> {
  const { revision, kvs } = await store.listWithRevision(ROOT);
  const kept = kvs.filter((kv) => kv.lease === undefined || kv.key.startsWith(machinePrefix));
  const entries = kept.map(({ key, value }) => ({ key, value }));
  const { text, manifest } = encodeBackup(entries, { platformVersion, revision, createdAt: now.toISOString() });
  return { text, manifest, leasedLeftOut: kvs.length - kept.length };
}

/**
 * Writes `text` to `path` readable by its owner only (the file holds token hashes, registry
 * passwords and certificate keys), so `path` is either the old file or the whole new one.
 */
export function writePrivateFile(path: string, text: string): Promise<void> {
  return writeFileDurably(path, text, { mode: 0o600 });
}
