import { once } from 'node:events';
import { Readable, Writable } from 'node:stream';
import type Docker from 'dockerode';
import { RotationDedup } from './log-rotation-dedup.js';

// Docker 20.10's json-file follower can stop delivering a unit's output while the unit goes on
// writing it: seen after a burst of rotations, the follower waits on the current file for a change
// notice that never comes, while a new follower reads on (unit-logs.test caught it about one run
// in four). So a followed log that has been silent for a while is asked for again from the
// timestamp of its newest line; the dedup (log-rotation-dedup.ts) drops what the new follower
// repeats. A unit that is only quiet costs one short request to the engine per interval, and the
// interval doubles while it stays quiet.

export interface FollowTiming {
  /** Silence after which the engine is asked again. */
  silenceMs: number;
  /** The longest interval a quiet unit's log backs off to. */
  maxSilenceMs: number;
}

export const DEFAULT_FOLLOW_TIMING: FollowTiming = { silenceMs: 5_000, maxSilenceMs: 60_000 };

/**
 * Lines a new follower reads back from the end: whatever was written while the old one stalled, up
 * to this many (Docker reads a tail backwards from the end; `since` alone would make it decode the
 * whole log on every ask).
 */
const REASK_TAIL = 1_000;

/** Docker's `since`: seconds and nanoseconds since the epoch. */
export const sinceParameter = (ns: bigint): string => `${ns / 1_000_000_000n}.${(ns % 1_000_000_000n).toString().padStart(9, '0')}`;

export interface FollowedLog {
  /** The text, each line once. */
  text: Readable;
  /** Stops reading from the engine (the client went away). */
  close(): void;
}

/**
 * Docker multiplexes stdout and stderr into one framed stream; `text` gets the plain text, each
 * line once (the frames carry timestamps for that: log-rotation-dedup.ts), and ends or fails with
 * the stream while `isCurrent` (a follower asked again has moved on to a newer stream).
 */
export function demultiplexInto(docker: Docker, stream: NodeJS.ReadableStream, text: RotationDedup, isCurrent: () => boolean = () => true): void {
  docker.modem.demuxStream(stream, text, text);
  // Docker ends a followed log when the container stops: so does the text.
  stream.once('end', () => isCurrent() && text.end());
  stream.once('error', (error) => isCurrent() && text.destroy(error));
}

/**
 * The text of a log already read whole (`follow: false`), frames in order (timestamps kept when
 * they were asked for), each ending its line: what a failed container's kept output is made of.
 * The engine sends a line with its newline; a frame without one is a run's last words, flushed at
 * its exit, which a container restarted in place follows in the same log with the next run's first
 * line (or a piece of a line longer than the engine's 16 KiB buffer, with its own timestamp).
 */
export async function demultiplexedText(docker: Docker, raw: Buffer): Promise<string> {
  const frames: Buffer[] = [];
  const newline = Buffer.from('\n');
  const collected = new Writable({
    write(frame: Buffer, _encoding, done) {
      frames.push(frame);
      if (frame.at(-1) !== newline[0]) frames.push(newline);
      done();
    },
  });
  const source = Readable.from([raw]);
  docker.modem.demuxStream(source, collected, collected);
  await once(source, 'end');
  return Buffer.concat(frames).toString('utf8');
}

/**
 * Follows a container's log from the stream `first` (asked with `follow` and `timestamps`), asking
 * the engine again whenever it has been silent for the current interval.
 */
export function followLog(docker: Docker, container: Docker.Container, first: NodeJS.ReadableStream, timing: FollowTiming = DEFAULT_FOLLOW_TIMING): FollowedLog {
  const text = new RotationDedup();
  const startedNs = BigInt(Date.now()) * 1_000_000n;
  let source: NodeJS.ReadableStream | undefined;
  let closed = false;
  let interval = timing.silenceMs;
  let framesAtCheck = 0;
  let timer: NodeJS.Timeout | undefined;

  const attach = (stream: NodeJS.ReadableStream): void => {
    source = stream;
    demultiplexInto(docker, stream, text, () => source === stream);
  };
  const detach = (): void => {
    const old = source as (NodeJS.ReadableStream & { destroy?: () => void }) | undefined;
    source = undefined;
    old?.destroy?.();
  };
  const close = (): void => {
    closed = true;
    clearTimeout(timer);
    detach();
  };

  const check = async (): Promise<void> => {
    if (closed) return;
    if (text.frames !== framesAtCheck) {
      framesAtCheck = text.frames;
      interval = timing.silenceMs;
    } else {
      const since = text.newest >= 0n ? text.newest : startedNs;
      try {
        const again = (await container.logs({ stdout: true, stderr: true, follow: true, timestamps: true, tail: REASK_TAIL, since: sinceParameter(since) })) as NodeJS.ReadableStream;
        if (closed) {
          (again as NodeJS.ReadableStream & { destroy?: () => void }).destroy?.();
          return;
        }
        detach();
        attach(again);
      } catch {
        // The container is gone or the engine does not answer: the current stream says so itself.
      }
      interval = Math.min(interval * 2, timing.maxSilenceMs);
    }
    timer = setTimeout(() => void check(), interval).unref();
  };

  attach(first);
  timer = setTimeout(() => void check(), interval).unref();
  text.once('close', close);
  return { text, close };
}
