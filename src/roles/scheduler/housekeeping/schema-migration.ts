import type { FastifyBaseLogger } from 'fastify';
import type { Compare, KeyValue, Operation, Store } from '../../../store/store.js';
import { journalPrefix, ROOT, servicePrefix } from '../../../store/keys.js';
import { STORE_SCHEMA_VERSION } from '../../../store/schema-version.js';
import { readStoreSchema, schemaAdvance, type StoreSchema } from '../../../store/store-schema.js';
import { migrationPath } from '../../../store/schema-migrations.js';
import { backupToDirectory } from '../../../backup/backup-directory.js';
import { platformVersion } from '../../../platform-version.js';
import { journalWrite } from '../../../store/records/journal.js';

// The scheduler leader moves the store's layout forward to this program's schema, once: a verified
// backup of the store as it was first (the way back, docs/upgrades.md; one that does not verify
// stops the migration, and the leader tries again), then every step's writes,
// the new schema record and a journal entry in one transaction. That transaction is fenced by the
// leadership and guarded on the schema record's revision (and on every key a step rewrites), so of
// two leaders, or a leader and a restarted copy of itself, only one migrates; the other finds the
// store current and carries on.

export interface SchemaMigrationOptions {
  /** The unfenced store, read for the backup. */
  store: Store;
  /** The leader's fenced store: the migration's one write. */
  leaderStore: Store;
  backupDir: string;
  log: FastifyBaseLogger;
  now?: () => Date;
}

export interface Migrated {
  from: number;
  to: number;
  /** Absent for a new store, which holds nothing to back up. */
  backupFile?: string;
}

/** Migrates the store when it is older than this program; undefined when it was current already (or another leader migrated it). */
export async function migrateStoreSchema(options: SchemaMigrationOptions, target = STORE_SCHEMA_VERSION): Promise<Migrated | undefined> {
  const schema = await readStoreSchema(options.store);
  if (schema.version >= target) return undefined;
  const now = options.now ?? (() => new Date());
  const steps = migrationPath(schema.version, target);
  // A new store is stamped as it is: nothing to keep, nothing to journal. New: no service and no
  // journal entry (every change made through the API is journaled); roles write a few keys of their
  // own when they start (the session key), so "empty" would not do.
  const isNew = (await options.store.list(servicePrefix)).length === 0 && (await options.store.list(journalPrefix)).length === 0;
  if (!isNew) options.log.info({ from: schema.version, to: target }, 'the store schema is older than this program: backing it up, then migrating');
  // Labelled, so the scheduled backups' rotation in the same directory never deletes it (src/backup/backup-directory.ts).
  const backupFile = isNew ? undefined : (await backupToDirectory(options.store, options.backupDir, { now: now(), label: `before-schema-${target}` })).file;
  const { kvs } = await options.store.listWithRevision(ROOT);
  const writes = steps.flatMap((step) => step.plan(kvs));
  const advance = schemaAdvance(schema, target, platformVersion, now());
  const stepText = steps.map((step) => `${step.from}→${step.to}: ${step.description}`).join('; ');
  const message = `store schema ${schema.version} → ${target} (${stepText}); the store as it was is in ${backupFile}`;
  const result = await options.leaderStore.txn(
    [advance.compare, ...unchangedSince(kvs, writes)],
    [...writes, advance.write, ...(backupFile ? [journalWrite({ kind: 'store.migrated', message })] : [])],
  );
  if (!result.succeeded) return settledElsewhere(options.store, schema, target);
  options.log.info({ from: schema.version, to: target, backupFile }, 'store schema migrated');
  return { from: schema.version, to: target, ...(backupFile ? { backupFile } : {}) };
}

/** Every key the steps write still has the revision the steps were planned on (absent ones still absent). */
function unchangedSince(records: readonly KeyValue[], writes: readonly Operation[]): Compare[] {
  const revisions = new Map(records.map((kv) => [kv.key, kv.modRevision]));
  return writes.flatMap((write): Compare[] =>
    write.op === 'deletePrefix' ? [] : [{ key: write.key, target: 'modRevision', equals: revisions.get(write.key) ?? 0 }],
  );
}

/** The guarded write failed: fine when another leader migrated meanwhile, else the records moved under the plan (the next election retries). */
async function settledElsewhere(store: Store, before: StoreSchema, target: number): Promise<undefined> {
  const now = await readStoreSchema(store);
  if (now.version >= target) return undefined;
  throw new Error(`the store changed while migrating it from schema ${before.version} to ${target}; not migrated, retrying`);
}
