import { Transform, type TransformCallback } from 'node:stream';

// Docker 20.10's json-file follower re-reads a rotated file when it switches files: a follower of
// a chatty unit sees whole files' worth of lines twice, out of order. The agent asks Docker for
// each line's timestamp (fixed-width RFC 3339 with nanoseconds, one per frame) and passes a line
// on only when it is newer than the last one passed, then drops the timestamp. What was rotated
// away before a slow reader reached it is gone: that is the bound doing its work.

/** Nanoseconds since the epoch of Docker's `2006-01-02T15:04:05.000000000Z07:00`; undefined when it is not one. */
export function timestampNs(text: string): bigint | undefined {
  const match = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$/.exec(text);
  if (!match) return undefined;
  const seconds = Date.parse(`${match[1]}${match[3]}`);
  if (Number.isNaN(seconds)) return undefined;
  return BigInt(seconds) * 1_000_000n + BigInt((match[2] ?? '').padEnd(9, '0'));
}

/**
 * Takes one demultiplexed frame per write (`<timestamp> <text>`, as `docker logs --timestamps`
 * sends them) and passes on the text of frames newer than every frame before. A frame without a
 * timestamp passes as it is.
 */
export class RotationDedup extends Transform {
  private last = -1n;
  /** Frames passed on so far: whether the source still delivers anything new (log-follower.ts). */
  frames = 0;

  /** Nanoseconds since the epoch of the newest frame passed on; -1 before the first. */
  get newest(): bigint {
    return this.last;
  }

  override _transform(frame: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    const space = frame.indexOf(0x20);
    const at = space > 0 && space <= 40 ? timestampNs(frame.subarray(0, space).toString('latin1')) : undefined;
    if (at === undefined) {
      this.frames += 1;
      return done(null, frame);
    }
    if (at <= this.last) return done();
    this.last = at;
    this.frames += 1;
    done(null, frame.subarray(space + 1));
  }
}
