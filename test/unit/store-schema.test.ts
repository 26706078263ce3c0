import t from 'tap';
import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { pino } from 'pino';
import type { FastifyBaseLogger } from 'fastify';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import { journalKey, journalPrefix, serviceKey, sessionKeyKey, storeSchemaKey, tokensIssuedKey } from '../../src/store/keys.js';
import { STORE_SCHEMA_VERSION } from '../../src/store/schema-version.js';
import { readStoreSchema, refuseNewerSchema, StoreSchemaError } from '../../src/store/store-schema.js';
import { migrationPath, schemaMigrations } from '../../src/store/schema-migrations.js';
import { migrateStoreSchema } from '../../src/roles/scheduler/housekeeping/schema-migration.js';
import { decodeBackup } from '../../src/backup/backup-file.js';
import { platformBin } from '../harness/platform.js';
import { freePort } from '../harness/free-port.js';

const log = pino({ level: 'silent' }) as unknown as FastifyBaseLogger;

/** A store in use: a token was issued, and the journal says so. */
async function storeInUse(store: EmbeddedStore): Promise<void> {
  const at = new Date().toISOString();
  await store.put(tokensIssuedKey, at);
  await store.put(journalKey('0000-bootstrap'), JSON.stringify({ id: '0000-bootstrap', at, kind: 'token.bootstrapped', message: 'first admin token' }));
}

const migrationsIn = async (store: EmbeddedStore) =>
  (await store.list(journalPrefix)).map((kv) => JSON.parse(kv.value) as { kind: string; message: string }).filter((entry) => entry.kind === 'store.migrated');

async function scratchStore(t: { teardown(fn: () => Promise<void>): void }): Promise<{ store: EmbeddedStore; dir: string }> {
  const dir = await mkdtemp(join(tmpdir(), 'store-schema-'));
  const store = await EmbeddedStore.open(join(dir, 'data'));
  t.teardown(async () => {
    await store.close().catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
  });
  return { store, dir };
}

t.test('a store without a schema record is schema 0; the registry leads from 0 to this program\'s version without a gap', async (t) => {
  const { store } = await scratchStore(t);
  t.same(await readStoreSchema(store), { version: 0, modRevision: 0 });
  t.same(migrationPath(0, STORE_SCHEMA_VERSION).map((step) => step.to), Array.from({ length: STORE_SCHEMA_VERSION }, (_, i) => i + 1));
  t.throws(() => migrationPath(0, 2, schemaMigrations.filter((step) => step.from !== 0)), /no store migration from schema 0 to 1/);
});

t.test('a newer schema than the program knows is refused, naming both versions', async (t) => {
  t.throws(() => refuseNewerSchema(STORE_SCHEMA_VERSION + 1, 'etcd http://e:2379', '0.2.0'), {
    name: 'StoreSchemaError',
    message: new RegExp(`schema version ${STORE_SCHEMA_VERSION + 1}, newer than the ${STORE_SCHEMA_VERSION} this program \\(platform 0\\.2\\.0\\) knows`),
  });
  t.doesNotThrow(() => refuseNewerSchema(STORE_SCHEMA_VERSION, 'x', '0.2.0'));
  t.doesNotThrow(() => refuseNewerSchema(0, 'x', '0.2.0'));
  const { store } = await scratchStore(t);
  await store.put(storeSchemaKey, 'garbage');
  await t.rejects(readStoreSchema(store), StoreSchemaError, 'an unreadable record is an error, never "unversioned"');
});

t.test('platform serve exits non-zero against a store of a newer schema, naming both versions', async (t) => {
  const { store, dir } = await scratchStore(t);
  const newer = STORE_SCHEMA_VERSION + 1;
  await store.put(storeSchemaKey, JSON.stringify({ version: newer, migratedAt: new Date().toISOString(), by: '9.9.9' }));
  await store.close();
  const run = promisify(execFile)(process.execPath, [platformBin, 'serve', '--role', 'directory', '--port', String(await freePort()), '--data-dir', join(dir, 'data')], { timeout: 60_000 });
  const failure = await run.then(
    () => undefined,
    (error: unknown) => error as { code?: number; stderr: string },
  );
  t.ok(failure, 'the role did not start');
  t.equal(failure?.code, 1, 'exit status 1');
  t.match(failure?.stderr, `has schema version ${newer}, newer than the ${STORE_SCHEMA_VERSION} this program`);
});

t.test('the leader migrates an unversioned store once, after a verified backup, and journals it', async (t) => {
  const { store, dir } = await scratchStore(t);
  await storeInUse(store);
  const backupDir = join(dir, 'backups');
  const migrated = await migrateStoreSchema({ store, leaderStore: store, backupDir, log });
  t.match(migrated, { from: 0, to: STORE_SCHEMA_VERSION });
  t.equal((await readStoreSchema(store)).version, STORE_SCHEMA_VERSION);
  const files = await readdir(backupDir);
  t.equal(files.length, 1, 'one backup');
  t.equal((await stat(join(backupDir, files[0]!))).mode & 0o777, 0o600, 'readable by its owner only');
  const backup = decodeBackup(await readFile(join(backupDir, files[0]!), 'utf8'));
  t.equal(backup.manifest.schemaVersion, 0, 'the backup is of the store as it was');
  t.ok(backup.entries.some((entry) => entry.key === tokensIssuedKey));
  t.match(files[0], /^platform-.*-before-schema-1\.backup$/, 'labelled: the scheduled backups\' rotation keeps it');
  t.notOk(backup.entries.some((entry) => entry.key === storeSchemaKey));

  t.equal(await migrateStoreSchema({ store, leaderStore: store, backupDir, log }), undefined, 'a second leader finds it current');
  t.equal((await readdir(backupDir)).length, 1, 'and takes no backup');
  const migrations = await migrationsIn(store);
  t.equal(migrations.length, 1, 'one journal entry');
  t.match(migrations[0]?.message, `store schema 0 → ${STORE_SCHEMA_VERSION}`);
});

t.test('of two leaders migrating at once, one writes the schema; the other finds it done', async (t) => {
  const { store, dir } = await scratchStore(t);
  await storeInUse(store);
  const options = { store, leaderStore: store, backupDir: join(dir, 'backups'), log };
  // Two leaders are two processes: their backups have different times (and temporary files).
  const at = (ms: number) => () => new Date(Date.parse('2026-11-26T20:00:00Z') + ms);
  const results = await Promise.all([migrateStoreSchema({ ...options, now: at(0) }), migrateStoreSchema({ ...options, now: at(1000) })]);
  t.equal(results.filter(Boolean).length, 1, 'one migrated');
  t.equal((await store.get(storeSchemaKey))?.version, 1, 'the record was written once');
  t.equal((await migrationsIn(store)).length, 1);
});

t.test('a new store is stamped without a backup or a journal entry', async (t) => {
  const { store, dir } = await scratchStore(t);
  await store.put(sessionKeyKey, 'k'.repeat(43)); // what roles write for themselves when they start
  const migrated = await migrateStoreSchema({ store, leaderStore: store, backupDir: join(dir, 'backups'), log });
  t.match(migrated, { from: 0, to: STORE_SCHEMA_VERSION });
  t.equal(migrated?.backupFile, undefined);
  await t.rejects(stat(join(dir, 'backups')), 'no backup directory made');
  t.same(await store.list(journalPrefix), [], 'nothing journaled');
});

t.test('a store whose backup does not verify is not migrated: no file, the schema as it was', async (t) => {
  const { store, dir } = await scratchStore(t);
  await store.put(serviceKey('web'), JSON.stringify({ name: 'web' }));
  await t.rejects(migrateStoreSchema({ store, leaderStore: store, backupDir: join(dir, 'backups'), log }), /does not verify: record \/platform\/directory\/services\/web/);
  t.equal((await readStoreSchema(store)).version, 0);
  t.same(await store.list(journalPrefix), []);
  await t.rejects(stat(join(dir, 'backups')), 'no backup written');
});
