import { storeSchemaKey } from './keys.js';
import { STORE_SCHEMA_VERSION } from './schema-version.js';
import type { Compare, KeyValue, Operation, Store } from './store.js';
import type { StoreSchemaRecord } from '../schemas/store-schema.js';

// The one owner of /platform/meta/schema: reading the store's layout version, refusing one newer
// than this program knows, and the guarded write that moves it forward (the scheduler leader's
// migration, src/roles/scheduler/housekeeping/schema-migration.ts). A store without the record was made before
// versions were recorded (0.1.x): it is schema 0, whose records schema 1 reads unchanged.

export const UNVERSIONED_SCHEMA = 0;

export interface StoreSchema {
  version: number;
  /** The record's mod revision, 0 while absent: the migration's transaction compares it. */
  modRevision: number;
}

/** The layout version a record's value names; an unreadable one is an error, never "unversioned". */
export function schemaVersionOf(value: string | undefined): number {
  if (value === undefined) return UNVERSIONED_SCHEMA;
  let version: unknown;
  try {
    version = (JSON.parse(value) as Partial<StoreSchemaRecord>).version;
  } catch {
    version = undefined;
  }
  if (typeof version !== 'number' || !Number.isInteger(version) || version < 1) {
    throw new StoreSchemaError(`${storeSchemaKey} holds no schema version (${JSON.stringify(value.slice(0, 80))}): restore a backup or ask the platform's maintainers`);
  }
  return version;
}

/** The schema version recorded among a copy's entries (a backup's): schema 0 when it holds no schema record. */
export const schemaVersionAmong = (entries: readonly { key: string; value: string }[]): number =>
  schemaVersionOf(entries.find((entry) => entry.key === storeSchemaKey)?.value);

export const storeSchemaOf = (kv: KeyValue | undefined): StoreSchema => ({ version: schemaVersionOf(kv?.value), modRevision: kv?.modRevision ?? 0 });

export async function readStoreSchema(store: Store): Promise<StoreSchema> {
  return storeSchemaOf(await store.get(storeSchemaKey));
}

export class StoreSchemaError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StoreSchemaError';
  }
}

/** Every role calls this at start: a newer layout than this program knows could be misread, or overwritten in the old shape. */
export function refuseNewerSchema(found: number, description: string, platformVersion: string, known = STORE_SCHEMA_VERSION): void {
  if (found > known) {
    throw new StoreSchemaError(
      `the store (${description}) has schema version ${found}, newer than the ${known} this program (platform ${platformVersion}) knows: ` +
        'run the version that migrated it, or a later one (docs/upgrades.md)',
    );
  }
}

/** The transaction's guard and write that move the store from `from` to `to`: it fails if anyone moved it first. */
export function schemaAdvance(from: StoreSchema, to: number, by: string, now: Date): { compare: Compare; write: Operation } {
  const record: StoreSchemaRecord = { version: to, migratedAt: now.toISOString(), by };
  return {
    compare: { key: storeSchemaKey, target: 'modRevision', equals: from.modRevision },
    write: { op: 'put', key: storeSchemaKey, value: JSON.stringify(record) },
  };
}
