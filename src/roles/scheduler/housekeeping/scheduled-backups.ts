import type { FastifyBaseLogger } from 'fastify';
import { Gauge } from 'prom-client';
import type { Store } from '../../../store/store.js';
import { roleRegistry } from '../../../http/metrics.js';
import { backupToDirectory, newestBackup, rotateBackups } from '../../../backup/backup-directory.js';
import { formatBytes } from '../../../backup/backup-file.js';
import type { BackupSchedule } from '../../../config.js';
import { appendJournal } from '../../../store/records/journal.js';

// The leader's scheduled backups (--backup-dir, --backup-interval, --backup-keep; docs/operations.md
// "Scheduled backups"): every interval a backup is taken, verified, written to the directory, and
// the oldest beyond --backup-keep deleted. Only after a new one is written: a failing backup never
// costs the ones that verified. The directory is the schedule's memory: a new leader (a restart, a
// failover onto a scheduler that shares the directory) takes the next backup an interval after the
// newest file in it, not at once.

const lastSuccess = new Gauge({
  name: 'platform_backup_last_success_timestamp_seconds',
  help: 'When the newest verified scheduled backup was taken (Unix seconds), as the leading scheduler last saw it (--backup-dir).',
  registers: [roleRegistry('scheduler')],
});

/** /readyz warns when the newest verified backup is older than this many intervals. */
const STALE_INTERVALS = 2;

export interface BackupReadiness {
  dir: string;
  intervalSeconds: number;
  keep: number;
  newest?: string;
  newestTakenAt?: string;
  lastFailure?: { at: string; message: string };
  warning?: string;
}

export class ScheduledBackups {
  private timer: NodeJS.Timeout | undefined;
  private leading = false;
  /** When this leadership began: with no backup in the directory, the age /readyz judges. */
  private leadingSince = 0;
  private running: Promise<void> | undefined;
  private lastFailure: { at: string; message: string } | undefined;

  constructor(
    private readonly schedule: BackupSchedule,
    private readonly parts: {
      /** The store the backups read. */
      store: Store;
      /** The leader's fenced store, for the journal lines. */
      journal: Store;
      log: FastifyBaseLogger;
    },
  ) {}

  /** On election: the next backup is due an interval after the newest in the directory (at once when there is none). */
  async lead(): Promise<void> {
    this.leading = true;
    this.leadingSince = Date.now();
    const newest = await newestBackup(this.schedule.dir).catch(() => undefined);
    if (newest) lastSuccess.set(newest.takenAt.getTime() / 1000);
    const due = newest ? newest.takenAt.getTime() + this.schedule.intervalMs - Date.now() : 0;
    if (this.leading) this.after(Math.min(Math.max(0, due), this.schedule.intervalMs));
  }

  /** On losing the leadership, and on close: no further backups; one under way finishes. */
  stop(): void {
    this.leading = false;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  async close(): Promise<void> {
    this.stop();
    await this.running;
  }

  async readiness(): Promise<BackupReadiness> {
    const { dir, intervalMs, keep } = this.schedule;
    const state: BackupReadiness = { dir, intervalSeconds: intervalMs / 1000, keep, ...(this.lastFailure ? { lastFailure: this.lastFailure } : {}) };
    // Followers take none; the leader's /readyz is the one to watch.
    if (!this.leading) return state;
    const newest = await newestBackup(dir).catch(() => undefined);
    const age = Date.now() - (newest?.takenAt.getTime() ?? this.leadingSince);
    const stale = age > STALE_INTERVALS * intervalMs;
    return {
      ...state,
      ...(newest ? { newest: newest.name, newestTakenAt: newest.takenAt.toISOString() } : {}),
      ...(stale
        ? {
            warning: newest
              ? `the newest verified backup in ${dir}, ${newest.name}, is older than ${STALE_INTERVALS} backup intervals`
              : `no verified backup in ${dir} for ${STALE_INTERVALS} backup intervals`,
          }
        : {}),
    };
  }

  private after(ms: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.running = this.takeOne().finally(() => {
        this.running = undefined;
        if (this.leading) this.after(this.schedule.intervalMs);
      });
    }, ms);
  }

  private async takeOne(): Promise<void> {
    if (!this.leading) return;
    let written: Awaited<ReturnType<typeof backupToDirectory>>;
    try {
      written = await backupToDirectory(this.parts.store, this.schedule.dir);
    } catch (error) {
      await this.failed(`backup to ${this.schedule.dir} failed: ${(error as Error).message}`, error);
      return;
    }
    lastSuccess.set(Date.parse(written.manifest.createdAt) / 1000);
    const { keyCount, revision } = written.manifest;
    const summary = `backup ${written.file} written and verified: ${keyCount} keys at revision ${revision}, ${formatBytes(written.bytes)}`;
    let deleted: string[];
    try {
      deleted = await rotateBackups(this.schedule.dir, this.schedule.keep);
    } catch (error) {
      await this.failed(`${summary}; deleting the backups beyond the newest ${this.schedule.keep} failed: ${(error as Error).message}`, error);
      return;
    }
    this.lastFailure = undefined;
    const message = `${summary}${deleted.length > 0 ? `; deleted ${deleted.join(', ')}` : ''}`;
    this.parts.log.info({ file: written.file, keys: keyCount, revision, deleted }, 'scheduled backup written and verified');
    await this.journal('backup.succeeded', message);
  }

  private async failed(message: string, error: unknown): Promise<void> {
    this.lastFailure = { at: new Date().toISOString(), message };
    this.parts.log.warn({ err: error, dir: this.schedule.dir }, 'scheduled backup failed; trying again in one interval');
    await this.journal('backup.failed', message);
  }

  private async journal(kind: string, message: string): Promise<void> {
    await appendJournal(this.parts.journal, { kind, message }).catch((error: unknown) => {
      this.parts.log.warn({ err: error }, 'could not journal a scheduled backup');
    });
  }
}
