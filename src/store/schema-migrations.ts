import type { KeyValue, Operation } from './store.js';

// The store's layout migrations, numbered: step N→N+1 turns a schema N store into a schema N+1
// one. A step is pure: given every key under /platform/ at one revision, the writes it needs. The
// scheduler leader applies the steps from the store's version to the program's in one
// transaction, after a backup, guarded on the schema record and on every key a step rewrites
// (src/roles/scheduler/housekeeping/schema-migration.ts). A release that reshapes records adds a step here and
// raises STORE_SCHEMA_VERSION (src/store/schema-version.ts), and its code keeps reading the
// previous shape too, since roles of the older minor version run beside it (docs/upgrades.md).

export interface SchemaMigration {
  from: number;
  to: number;
  /** For the journal and the logs. */
  description: string;
  plan(records: readonly KeyValue[]): Operation[];
}

export const schemaMigrations: readonly SchemaMigration[] = [
  {
    from: 0,
    to: 1,
    // Since 0.1.0, ended-session records became {token, endsAt} (the old time-only ones are read as
    // they are) and volumes became <service>.<instance>.<name> (the agent adopts the old names):
    // both are read in either shape, so there is nothing to rewrite, only the version to record.
    description: 'record the schema version of a store made before 0.2.0 (its records are read unchanged)',
    plan: () => [],
  },
];

/** The steps from `from` to `to`, in order; a gap in the registry is a defect, named. */
export function migrationPath(from: number, to: number, steps: readonly SchemaMigration[] = schemaMigrations): SchemaMigration[] {
  const path: SchemaMigration[] = [];
  for (let version = from; version < to; version += 1) {
    const step = steps.find((candidate) => candidate.from === version);
    if (!step || step.to !== version + 1) throw new Error(`no store migration from schema ${version} to ${version + 1}`);
    path.push(step);
  }
  return path;
}
