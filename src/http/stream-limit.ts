import type { ServerResponse } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { HttpError } from './errors.js';
import { callerToken } from '../auth/guard.js';
import { clientAddress } from '../auth/caller.js';

// Event streams and followed log tails stay open for as long as the client wants; each holds a
// connection, watches or a Docker log stream. They are counted, and one past the cap is answered
// 503 with Retry-After naming the cap, before anything is opened for it. One caller may hold only
// a share of the cap (429 past it), so a single token cannot take every stream from the others.

/** Seconds a client refused a stream is asked to wait (EventSource reconnects after its own delay). */
export const STREAM_RETRY_AFTER_SECONDS = 5;

/** Event streams (GET /events) one orchestrator serves at once. */
export const MAX_EVENT_STREAMS = 100;

/** Followed log tails (`?follow=true`) one orchestrator or agent serves at once. */
export const MAX_LOG_TAILS = 50;

/** The share of a cap one caller may hold. */
export const CALLER_SHARE = 0.2;

/**
 * Who holds a stream, for its per-caller share: the token (a session stands for its token, so
 * signing in again gains nothing), else the address of a call that needed none.
 */
export function streamHolder(request: FastifyRequest): string {
  const token = callerToken(request);
  return token ? `token ${token.name}` : clientAddress(request);
}

export class StreamLimit {
  private open = 0;
  private readonly byHolder = new Map<string, number>();
  /** Streams one caller may hold at once. */
  readonly perCaller: number;

  constructor(
    /** What is counted, as the refusal names it: "event streams". */
    private readonly what: string,
    readonly max: number,
  ) {
    this.perCaller = Math.max(1, Math.floor(max * CALLER_SHARE));
  }

  get count(): number {
    return this.open;
  }

  /**
   * Counts the reply's stream until its connection closes, and lifts the idle timeout for it (a
   * quiet log tail is not a stalled client); throws 503 when `max` streams are open, 429 when its
   * caller holds its share.
   */
  admit(reply: FastifyReply): void {
    if (this.open >= this.max) {
      void reply.header('retry-after', String(STREAM_RETRY_AFTER_SECONDS));
      throw new HttpError(503, `too many ${this.what}: at most ${this.max} are served at once; try again later`);
    }
    const holder = streamHolder(reply.request);
    const held = this.byHolder.get(holder) ?? 0;
    if (held >= this.perCaller) {
      void reply.header('retry-after', String(STREAM_RETRY_AFTER_SECONDS));
      const share = `one caller holds at most ${this.perCaller} at once (of ${this.max} served)`;
      throw new HttpError(429, `too many ${this.what} from ${holder}: ${share}; close one first`);
    }
    this.open += 1;
    this.byHolder.set(holder, held + 1);
    reply.raw.once('close', () => {
      this.open -= 1;
      const left = (this.byHolder.get(holder) ?? 1) - 1;
      if (left > 0) this.byHolder.set(holder, left);
      else this.byHolder.delete(holder);
    });
    keepOpen(reply.raw);
  }
}

/** A long-lived response is not cut by the server's idle timeout (connection-limits.ts). */
export function keepOpen(response: ServerResponse): void {
  response.socket?.setTimeout(0);
}
