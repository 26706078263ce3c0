import { deploymentPrefix, machinePrefix, ROOT } from '../store/keys.js';
import type { Store } from '../store/store.js';
import type { Deployment } from '../schemas/release.js';
import { isFinished } from '../schemas/states.js';
import type { BackupEntry } from '../schemas/backup.js';
import type { BackupContents } from './backup-file.js';

// `platform backup restore`: a backup's entries into a store that holds nothing under /platform/
// (or, with --force, after deleting what it holds). A deployment in flight when the backup was
// taken is written as failed, so the next scheduler leader does not roll out again what an
// operator may have long since replaced: the units its assignments name are adopted as they run.
// Machine registrations go back under a lease nobody renews: each agent replaces its own when it
// starts, and a machine whose agent never comes back expires and is healed as lost.

export class RestoreRefusedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RestoreRefusedError';
  }
}

export interface RestoreOutcome {
  written: number;
  /** Keys deleted first (--force). */
  deleted: number;
  /** Ids of the deployments that were in flight and are now failed. */
  settled: string[];
  /** The store's revision after the restore; below the backup's on a new etcd. */
  revision: number;
}

/** etcd takes 128 operations per transaction by default. */
const PUT_BATCH = 100;
/** How long restored machine registrations wait for their agents (the embedded store drops them when it next opens). */
export const MACHINE_GRACE_SECONDS = 60;

export async function restoreBackup(store: Store, backup: BackupContents, options: { force: boolean; now?: Date }): Promise<RestoreOutcome> {
  const existing = await store.list(ROOT);
  if (existing.length > 0 && !options.force) {
    throw new RestoreRefusedError(
      `the store (${store.description}) is not empty: it holds ${existing.length} keys under ${ROOT} (${existing[0]!.key} first); ` +
        'restore goes into an empty store, or give --force to delete those keys first',
    );
  }
  const deleted = existing.length > 0 ? await store.deletePrefix(ROOT) : 0;
  const { entries, settled } = settleInFlight(backup.entries, backup.manifest.revision, options.now ?? new Date());
  const machines = entries.some((entry) => entry.key.startsWith(machinePrefix))
    ? (await store.grantLease(MACHINE_GRACE_SECONDS, { autoKeepAlive: false })).id
    : undefined;
  const leaseOf = (key: string) => (machines !== undefined && key.startsWith(machinePrefix) ? { lease: machines } : {});
  let revision = 0;
  for (let i = 0; i < entries.length; i += PUT_BATCH) {
    const batch = entries.slice(i, i + PUT_BATCH).map(({ key, value }) => ({ op: 'put' as const, key, value, ...leaseOf(key) }));
    revision = (await store.txn([], batch)).revision;
  }
  return { written: entries.length, deleted, settled, revision };
}

/** The entries with every unfinished deployment marked failed, naming the backup's revision as the reason. */
export function settleInFlight(entries: readonly BackupEntry[], backupRevision: number, now: Date): { entries: BackupEntry[]; settled: string[] } {
  const settled: string[] = [];
  const at = now.toISOString();
  const reason = `in flight when the backup at revision ${backupRevision} was taken; settled by the restore, not rolled out again: deploy again if needed`;
  const result = entries.map((entry) => {
    if (!entry.key.startsWith(deploymentPrefix)) return entry;
    const deployment = JSON.parse(entry.value) as Deployment;
    if (isFinished(deployment)) return entry;
    settled.push(deployment.id);
    return { key: entry.key, value: JSON.stringify({ ...deployment, state: 'failed', reason, updatedAt: at, finishedAt: at } satisfies Deployment) };
  });
  return { entries: result, settled };
}
