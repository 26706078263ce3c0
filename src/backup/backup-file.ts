import { createHash } from 'node:crypto';
import type { ValidateFunction } from 'ajv';
import { buildAjv } from '../http/server.js';
import { ROOT } from '../store/keys.js';
import { schemaVersionAmong } from '../store/store-schema.js';
import { STORE_SCHEMA_VERSION } from '../store/schema-version.js';
import { BACKUP_FORMAT, BACKUP_FORMAT_VERSION, BackupEntry, BackupManifest } from '../schemas/backup.js';

// The backup file, purely: entries and their manifest to text, and text back to them with every
// check a reader owes before trusting a byte (format, versions, checksum, count, keys). Reading
// and writing stores and files is the callers' (take-backup.ts, restore-backup.ts).

export class BackupFileError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'BackupFileError';
  }
}

export interface BackupContents {
  manifest: BackupManifest;
  entries: BackupEntry[];
}

export type ManifestFields = Pick<BackupManifest, 'platformVersion' | 'revision' | 'createdAt'>;

const sha256 = (text: string): string => createHash('sha256').update(text).digest('hex');
const entryLines = (entries: readonly BackupEntry[]): string => entries.map((entry) => `${JSON.stringify({ key: entry.key, value: entry.value })}\n`).join('');

export function encodeBackup(entries: readonly BackupEntry[], fields: ManifestFields): { text: string; manifest: BackupManifest } {
  const body = entryLines(entries);
  const manifest: BackupManifest = {
    format: BACKUP_FORMAT,
    formatVersion: BACKUP_FORMAT_VERSION,
    platformVersion: fields.platformVersion,
    // The layout the entries are in (their own schema record's), not this program's: a backup of an
    // unmigrated store restores as one, and the leader that starts on it migrates it again.
    schemaVersion: schemaVersionAmong(entries),
    revision: fields.revision,
    keyCount: entries.length,
    createdAt: fields.createdAt,
    sha256: sha256(body),
  };
  return { text: `${JSON.stringify(manifest)}\n${body}`, manifest };
}

let validators: { manifest: ValidateFunction; entry: ValidateFunction } | undefined;
const validate = () => (validators ??= { manifest: buildAjv(false).compile(BackupManifest), entry: buildAjv(false).compile(BackupEntry) });

export function decodeBackup(text: string): BackupContents {
  const newline = text.indexOf('\n');
  if (newline < 0) throw new BackupFileError('not a platform backup: no manifest line');
  const manifest = parseManifest(text.slice(0, newline));
  const body = text.slice(newline + 1);
  const actual = sha256(body);
  if (actual !== manifest.sha256) {
    throw new BackupFileError(`the backup is damaged: its entries hash to sha256 ${actual}, the manifest says ${manifest.sha256}`);
  }
  const entries = parseEntries(body);
  if (entries.length !== manifest.keyCount) throw new BackupFileError(`the backup holds ${entries.length} keys, its manifest says ${manifest.keyCount}`);
  return { manifest, entries };
}

function parseManifest(line: string): BackupManifest {
  const manifest = parseJson(line, 'the manifest (line 1)') as Partial<BackupManifest> | null;
  if (manifest?.format !== BACKUP_FORMAT) throw new BackupFileError(`not a platform backup: line 1 has no "format": "${BACKUP_FORMAT}"`);
  // Versions first: a newer file may have a manifest this program cannot check.
  refuseNewer('format', manifest.formatVersion, BACKUP_FORMAT_VERSION, manifest.platformVersion);
  refuseNewer('store schema', manifest.schemaVersion, STORE_SCHEMA_VERSION, manifest.platformVersion);
  if (!validate().manifest(manifest)) throw new BackupFileError(`the backup's manifest is invalid: ${describeErrors(validate().manifest)}`);
  return manifest as BackupManifest;
}

function refuseNewer(what: string, version: unknown, known: number, writtenBy: unknown): void {
  if (typeof version === 'number' && version > known) {
    throw new BackupFileError(
      `the backup's ${what} version ${version} (written by platform ${String(writtenBy)}) is newer than this program's ${known}: use that version or later`,
    );
  }
}

function parseEntries(body: string): BackupEntry[] {
  const lines = body === '' ? [] : body.slice(0, body.endsWith('\n') ? -1 : undefined).split('\n');
  const seen = new Set<string>();
  return lines.map((line, index) => {
    const where = `line ${index + 2}`;
    const entry = parseJson(line, where);
    if (!validate().entry(entry)) throw new BackupFileError(`${where} is not a {key, value} entry: ${describeErrors(validate().entry)}`);
    const { key } = entry as BackupEntry;
    if (!key.startsWith(ROOT)) throw new BackupFileError(`${where}: key ${key} is outside ${ROOT}`);
    if (seen.has(key)) throw new BackupFileError(`${where}: key ${key} appears twice`);
    seen.add(key);
    return entry as BackupEntry;
  });
}

function parseJson(text: string, where: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new BackupFileError(`${where} of the backup is not JSON: ${(error as Error).message}`);
  }
}

export const describeErrors = (validator: ValidateFunction): string =>
  (validator.errors ?? []).map((error) => `${error.instancePath || '(record)'} ${error.message ?? 'is invalid'}`).join('; ');

/** A backup's size as the command and the scheduler's journal show it. */
export function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} kB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}
