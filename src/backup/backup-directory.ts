import { mkdir, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Store } from '../store/store.js';
import type { BackupManifest } from '../schemas/backup.js';
import { takeBackup, writePrivateFile } from './take-backup.js';
import { verifyBackup } from './verify-backup.js';

// A directory of backups, as the scheduled backups keep it (docs/operations.md "Scheduled
// backups"), and as anything else that wants a checked backup before a risky step can use it (a
// schema migration): each file is named for the moment it was taken, so names sort by time, and a
// file gets its name only after its backup verified, so every file named so is a verified one.

export class BackupVerifyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'BackupVerifyError';
  }
}

export interface DirectoryBackup {
  /** The file's full path. */
  file: string;
  manifest: BackupManifest;
  bytes: number;
}

/** `platform-2026-11-26T21-38-33.123Z.backup`, and `platform-…Z-<label>.backup` for a labelled one. */
const NAME = /^platform-(\d{4}-\d{2}-\d{2})T(\d{2})-(\d{2})-(\d{2}\.\d{3})Z(?:-([a-z0-9-]+))?\.backup$/;
const LABEL = /^[a-z0-9-]{1,40}$/;

/** The file name of a backup taken at `at`; ISO time with ":" (awkward in file names and scp) as "-". */
export function backupFileName(at: Date, label?: string): string {
  if (label !== undefined && !LABEL.test(label)) throw new Error(`a backup label is 1-40 lowercase letters, digits and "-", got ${JSON.stringify(label)}`);
  return `platform-${at.toISOString().replace(/:/g, '-')}${label === undefined ? '' : `-${label}`}.backup`;
}

/** When the backup in a file of this name was taken, and its label; undefined for any other name. */
export function parseBackupFileName(name: string): { takenAt: Date; label?: string } | undefined {
  const match = NAME.exec(name);
  if (!match) return undefined;
  const [, day, hours, minutes, seconds, label] = match;
  const takenAt = new Date(`${day}T${hours}:${minutes}:${seconds}Z`);
  if (Number.isNaN(takenAt.getTime())) return undefined;
  return { takenAt, ...(label === undefined ? {} : { label }) };
}

/**
 * Which of these file names rotation deletes: of the unlabelled backups, all but the newest
 * `keep`. Labelled ones (taken before a migration, by hand) are the operator's to delete; other
 * files are not backups.
 */
export function backupsBeyond(names: readonly string[], keep: number): string[] {
  const scheduled = names.filter((name) => {
    const parsed = parseBackupFileName(name);
    return parsed !== undefined && parsed.label === undefined;
  });
  scheduled.sort();
  return scheduled.slice(0, Math.max(0, scheduled.length - keep));
}

/** The newest backup file in `dir` (labelled or not), or undefined when it holds none or does not exist. */
export async function newestBackup(dir: string): Promise<{ name: string; takenAt: Date } | undefined> {
  let newest: { name: string; takenAt: Date } | undefined;
  for (const name of await listDirectory(dir)) {
    const parsed = parseBackupFileName(name);
    if (parsed && (!newest || parsed.takenAt > newest.takenAt)) newest = { name, takenAt: parsed.takenAt };
  }
  return newest;
}

/**
 * Takes a backup of `store`, verifies it (checksum, a restore into a scratch store, every record
 * against its schema) and only then writes it to `dir` (created 0700 when missing) as a file
 * readable by its owner only. A backup that does not verify is not written, and throws
 * BackupVerifyError naming the first bad record.
 */
export async function backupToDirectory(store: Store, dir: string, options: { now?: Date; label?: string } = {}): Promise<DirectoryBackup> {
  const now = options.now ?? new Date();
  const name = backupFileName(now, options.label);
  const taken = await takeBackup(store, now);
  const verified = await verifyBackup(taken.text);
  if (verified.firstBad) {
    const { key, family, reason } = verified.firstBad;
    throw new BackupVerifyError(`the backup at revision ${taken.manifest.revision} does not verify: record ${key} (${family}) does not match its schema: ${reason}`);
  }
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const file = join(dir, name);
  await writePrivateFile(file, taken.text);
  return { file, manifest: taken.manifest, bytes: Buffer.byteLength(taken.text) };
}

/** Deletes the backups beyond the newest `keep` (backupsBeyond); returns the names deleted. */
export async function rotateBackups(dir: string, keep: number): Promise<string[]> {
  const doomed = backupsBeyond(await listDirectory(dir), keep);
  for (const name of doomed) await rm(join(dir, name), { force: true });
  return doomed;
}

async function listDirectory(dir: string): Promise<string[]> {
  try {
    return await readdir(dir);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
}
