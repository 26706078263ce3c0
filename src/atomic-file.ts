import { randomBytes } from 'node:crypto';
import { open, rename, rm } from 'node:fs/promises';
import { renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

// A file other processes read whole (HAProxy's configuration, maps and certificates; the gateway's
// handover; a unit file, a backup, the first admin token) is written beside itself and renamed
// into place: a reader sees the old file or the new one, never a part. Written in place, a gateway
// killed mid-write left a truncated haproxy.cfg that the next HAProxy refused ("Missing LF on
// last line, file might have been truncated"), and an HAProxy starting or reloading while the
// gateway rewrote it could read half of it. The temporary file is made by this write alone
// ('wx', its mode from the first byte), so a file left there by anyone else is never written into.

function temporaryBeside(path: string): string {
  return join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(4).toString('hex')}`);
}

/** Writes `data` to `path` all at once: a temporary file in the same directory, renamed over it. */
export function writeFileAtomically(path: string, data: string, options: { mode?: number } = {}): void {
  const temporary = temporaryBeside(path);
  try {
    writeFileSync(temporary, data, { flag: 'wx', ...(options.mode === undefined ? {} : { mode: options.mode }) });
    renameSync(temporary, path);
  } catch (error) {
    rmSync(temporary, { force: true });
    throw error;
  }
}

/**
 * As writeFileAtomically, without blocking, and on disk before it is renamed into place (fsync):
 * for files written once and kept (a backup, a unit file, a token), which a crash right after the
 * rename must not leave empty. The gateway's files are regenerated at its start and need neither.
 */
export async function writeFileDurably(path: string, data: string, options: { mode?: number } = {}): Promise<void> {
  const temporary = temporaryBeside(path);
  const file = await open(temporary, 'wx', options.mode ?? 0o666);
  try {
    await file.writeFile(data);
    await file.sync();
    await file.close();
    await rename(temporary, path);
  } catch (error) {
    await file.close().catch(() => undefined);
    await rm(temporary, { force: true });
    throw error;
  }
}
