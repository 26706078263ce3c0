import t from 'tap';
import { backupFileName, backupsBeyond, parseBackupFileName } from '../../src/backup/backup-directory.js';
import { resolveConfig } from '../../src/config.js';

// Scheduled backups' pure parts: file names that sort by time, which files rotation deletes, and
// the flags' validation.

t.test('a backup file is named for when it was taken, sorts by time, and reads back', async (t) => {
  const at = new Date('2026-11-26T21:38:33.123Z');
  t.equal(backupFileName(at), 'platform-2026-11-26T21-38-33.123Z.backup');
  t.same(parseBackupFileName(backupFileName(at)), { takenAt: at });
  t.same(parseBackupFileName(backupFileName(at, 'pre-migration')), { takenAt: at, label: 'pre-migration' });
  const times = ['2026-01-02T00:00:00.000Z', '2025-12-31T23:59:59.999Z', '2026-01-01T10:00:00.000Z'].map((time) => new Date(time));
  const names = times.map((time) => backupFileName(time)).sort();
  t.same(names.map((name) => parseBackupFileName(name)!.takenAt.getTime()), times.map((time) => time.getTime()).sort((a, b) => a - b));
  for (const other of ['platform.backup', '.platform-2026-11-26T21-38-33.123Z.backup.12.tmp', 'platform-2026-13-40T99-00-00.000Z.backup', 'notes.txt']) {
    t.equal(parseBackupFileName(other), undefined, `${other} is not a backup`);
  }
  t.throws(() => backupFileName(at, 'Bad Label'), /a backup label is 1-40 lowercase letters/);
});

t.test('rotation deletes the oldest scheduled backups beyond keep, never labelled ones or other files', async (t) => {
  const name = (day: number, label?: string) => backupFileName(new Date(Date.UTC(2026, 10, day)), label);
  const names = [name(3), 'notes.txt', name(1), name(4, 'pre-migration'), name(2), name(1, 'by-hand')];
  t.same(backupsBeyond(names, 1), [name(1), name(2)]);
  t.same(backupsBeyond(names, 2), [name(1)]);
  t.same(backupsBeyond(names, 3), []);
  t.same(backupsBeyond([], 1), []);
});

t.test('--backup-dir, --backup-interval, --backup-keep and their variables', async (t) => {
  t.equal(resolveConfig({}, {}).scheduler.backups, undefined, 'off by default');
  t.same(resolveConfig({ backupDir: '/var/lib/platform-backups' }, {}).scheduler.backups, { dir: '/var/lib/platform-backups', intervalMs: 3_600_000, keep: 48 });
  const env = { PLATFORM_BACKUP_DIR: '/srv/backups', PLATFORM_BACKUP_INTERVAL: '6h', PLATFORM_BACKUP_KEEP: '14' };
  t.same(resolveConfig({}, env).scheduler.backups, { dir: '/srv/backups', intervalMs: 6 * 3_600_000, keep: 14 });
  t.same(resolveConfig({ backupInterval: '5s', backupKeep: '1' }, env).scheduler.backups, { dir: '/srv/backups', intervalMs: 5000, keep: 1 }, 'flags win');
  const refused: [Record<string, string>, RegExp][] = [
    [{ backupDir: 'backups' }, /--backup-dir must be an absolute path, got backups/],
    [{ backupDir: '/b', backupInterval: '4s' }, /--backup-interval must be at least 5s, got 4s/],
    [{ backupDir: '/b', backupInterval: 'hourly' }, /--backup-interval: a duration is a number and a unit/],
    [{ backupDir: '/b', backupKeep: '0' }, /--backup-keep must be an integer from 1 to 100000, got 0/],
    [{ backupInterval: '1h' }, /--backup-interval and --backup-keep need --backup-dir/],
  ];
  for (const [flags, message] of refused) t.throws(() => resolveConfig(flags, {}), message, JSON.stringify(flags));
});
