import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EmbeddedStore } from '../store/embedded-store.js';
import { ROOT } from '../store/keys.js';
import type { BackupManifest } from '../schemas/backup.js';
import { BackupFileError, decodeBackup } from './backup-file.js';
import { checkRecords, type RecordCheck } from './record-schemas.js';
import { restoreBackup } from './restore-backup.js';

// `platform backup verify`: the file's own checks (backup-file.ts), then a restore into a scratch
// embedded store, and every record read back from it checked against its family's schema. A
// backup that passes is one `restore` accepts and roles can read.

export interface Verified extends RecordCheck {
  manifest: BackupManifest;
}

export async function verifyBackup(text: string): Promise<Verified> {
  const backup = decodeBackup(text);
  const dir = await mkdtemp(join(tmpdir(), 'platform-backup-verify-'));
  try {
    const store = await EmbeddedStore.open(dir);
    try {
      await restoreBackup(store, backup, { force: false });
      const restored = (await store.list(ROOT)).map(({ key, value }) => ({ key, value }));
      if (restored.length !== backup.entries.length) {
        throw new BackupFileError(`a scratch store holds ${restored.length} keys after restoring the backup's ${backup.entries.length}`);
      }
      return { manifest: backup.manifest, ...checkRecords(restored) };
    } finally {
      await store.close();
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
