import { Type, type Static } from '@sinclair/typebox';

// A backup file of the platform's own state (docs/operations.md "Backup and restore"): one line of
// manifest, then one line per key. The manifest's sha256 covers every byte after the manifest's
// line, so a truncated or edited file is refused before anything is written anywhere.

/** The layout of the file itself; a reader refuses a newer one than it knows. */
export const BACKUP_FORMAT_VERSION = 1;
export const BACKUP_FORMAT = 'platform-backup';

export const BackupManifest = Type.Object(
  {
    format: Type.Literal(BACKUP_FORMAT),
    formatVersion: Type.Integer({ minimum: 1 }),
    platformVersion: Type.String({ description: 'the version of the program that wrote the backup' }),
    schemaVersion: Type.Integer({ minimum: 0, description: 'the store layout version of the entries (their /platform/meta/schema; 0 when absent)' }),
    revision: Type.Integer({ minimum: 0, description: 'the store revision every entry was read at' }),
    keyCount: Type.Integer({ minimum: 0 }),
    createdAt: Type.String({ format: 'date-time' }),
    sha256: Type.String({ pattern: '^[0-9a-f]{64}$', description: 'hex SHA-256 of the entry lines' }),
  },
  { additionalProperties: false },
);
export type BackupManifest = Static<typeof BackupManifest>;

export const BackupEntry = Type.Object({ key: Type.String({ minLength: 1 }), value: Type.String() }, { additionalProperties: false });
export type BackupEntry = Static<typeof BackupEntry>;
