import { randomBytes } from 'node:crypto';
import { renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

// A file other processes read whole (HAProxy's configuration, maps and certificates; the gateway's
// handover) is written beside itself and renamed into place: a reader sees the old file or the new
// one, never a part. Written in place, a gateway killed mid-write left a truncated haproxy.cfg
// that the next HAProxy refused ("Missing LF on last line, file might have been truncated"), and
// an HAProxy starting or reloading while the gateway rewrote it could read half of it.

/** Writes `data` to `path` all at once: a temporary file in the same directory, renamed over it. */
export function writeFileAtomically(path: string, data: string, options: { mode?: number } = {}): void {
  const temporary = join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(4).toString('hex')}`);
  try {
    writeFileSync(temporary, data, { flag: 'wx', ...(options.mode === undefined ? {} : { mode: options.mode }) });
    renameSync(temporary, path);
  } catch (error) {
    rmSync(temporary, { force: true });
    throw error;
  }
}
