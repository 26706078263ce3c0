import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { resolveEtcd, type EtcdFlags } from '../config.js';
import { openStore } from '../store/open-store.js';
import type { Store } from '../store/store.js';
import { decodeBackup, formatBytes } from './backup-file.js';
import { takeBackup, writePrivateFile } from './take-backup.js';
import { verifyBackup } from './verify-backup.js';
import { restoreBackup } from './restore-backup.js';

// `platform backup create|verify|restore` (docs/operations.md "Backup and restore"). The store is
// opened as every role opens it: etcd with --etcd, else the embedded store under --data-dir, which
// one process holds at a time, so `platform up` is stopped for the minute a backup takes (its
// units keep running and are adopted when it starts again).

export type StoreFlags = EtcdFlags & { dataDir?: string };

function dataDirOf(flags: StoreFlags): string {
  return resolve(flags.dataDir ?? process.env.PLATFORM_DATA_DIR ?? '.platform-data');
}

async function withStore<T>(flags: StoreFlags, mustExist: boolean, work: (store: Store) => Promise<T>): Promise<T> {
  const { etcd, etcdSecurity } = resolveEtcd(flags, process.env);
  const dataDir = dataDirOf(flags);
  // Opening a data directory that is not there would create an empty store and back up nothing.
  if (!etcd?.length && mustExist && !existsSync(dataDir)) throw new Error(`no embedded store at ${dataDir}: give its --data-dir, or --etcd`);
  const store = await openStore({ etcd, etcdSecurity, dataDir, warn: (message) => process.stderr.write(`warning: ${message}\n`) });
  try {
    return await work(store);
  } finally {
    await store.close();
  }
}

export async function create(flags: StoreFlags & { out: string }): Promise<void> {
  const taken = await withStore(flags, true, (store) => takeBackup(store));
  await writePrivateFile(flags.out, taken.text);
  const { keyCount, revision, sha256 } = taken.manifest;
  process.stdout.write(
    `backup of ${keyCount} keys at revision ${revision} written to ${flags.out} (${formatBytes(Buffer.byteLength(taken.text))}, sha256 ${sha256}); ` +
      `${taken.leasedLeftOut} leased keys of live processes left out\n`,
  );
}

export async function verify(file: string): Promise<void> {
  const result = await verifyBackup(await readFile(file, 'utf8'));
  const { keyCount, revision, platformVersion, schemaVersion, createdAt } = result.manifest;
  if (result.firstBad) {
    const { key, family, reason } = result.firstBad;
    process.stderr.write(`platform: ${file}: record ${key} (${family}) does not match its schema: ${reason}\n`);
    process.exitCode = 1;
    return;
  }
  const unchecked = [...result.unchecked].map(([group, count]) => `${group} ${count}`).join(', ');
  process.stdout.write(
    `${file}: backup of ${keyCount} keys at revision ${revision} (platform ${platformVersion}, schema ${schemaVersion}, created ${createdAt}): ` +
      `checksum good, restores into a scratch store, ${result.checked} records match their schemas` +
      `${unchecked === '' ? '' : `, ${keyCount - result.checked} have no schema to check (${unchecked})`}\n`,
  );
}

export async function restore(file: string, flags: StoreFlags & { force?: boolean }): Promise<void> {
  const backup = decodeBackup(await readFile(file, 'utf8'));
  const outcome = await withStore(flags, false, async (store) => ({
    ...(await restoreBackup(store, backup, { force: flags.force === true })),
    store: store.description,
  }));
  const { manifest } = backup;
  const lines = [
    `restored ${outcome.written} keys from ${file} (revision ${manifest.revision} of ${manifest.createdAt}) into ${outcome.store}` +
      (outcome.deleted > 0 ? `, after deleting the ${outcome.deleted} keys it held` : ''),
  ];
  if (outcome.settled.length > 0) lines.push(`deployments in flight at backup time, now failed (not rolled out again): ${outcome.settled.join(', ')}`);
  // Anything that remembers a revision of the old store would wait for revisions this one has not reached.
  if (outcome.revision < manifest.revision) {
    lines.push(`the store's revision is ${outcome.revision}, below the backup's ${manifest.revision}: start (or restart) every role on it now`);
  }
  process.stdout.write(`${lines.join('\n')}\n`);
}
