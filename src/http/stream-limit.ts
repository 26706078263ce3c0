import type { ServerResponse } from 'node:http';
import type { FastifyReply } from 'fastify';
import { HttpError } from './errors.js';

// Event streams and followed log tails stay open for as long as the client wants; each holds a
// connection, watches or a Docker log stream. They are counted, and one past the cap is answered
// 503 with Retry-After naming the cap, before anything is opened for it.

/** Seconds a client refused a stream is asked to wait (EventSource reconnects after its own delay). */
export const STREAM_RETRY_AFTER_SECONDS = 5;

/** Event streams (GET /events) one orchestrator serves at once. */
export const MAX_EVENT_STREAMS = 100;

/** Followed log tails (`?follow=true`) one orchestrator or agent serves at once. */
export const MAX_LOG_TAILS = 50;

export class StreamLimit {
  private open = 0;

  constructor(
    /** What is counted, as the refusal names it: "event streams". */
    private readonly what: string,
    readonly max: number,
  ) {}

  get count(): number {
    return this.open;
  }

  /**
   * Counts the reply's stream until its connection closes, and lifts the idle timeout for it (a
   * quiet log tail is not a stalled client); throws 503 when `max` streams are open.
   */
  admit(reply: FastifyReply): void {
    if (this.open >= this.max) {
      void reply.header('retry-after', String(STREAM_RETRY_AFTER_SECONDS));
      throw new HttpError(503, `too many ${this.what}: at most ${this.max} are served at once; try again later`);
    }
    this.open += 1;
    reply.raw.once('close', () => {
      this.open -= 1;
    });
    keepOpen(reply.raw);
  }
}

/** A long-lived response is not cut by the server's idle timeout (connection-limits.ts). */
export function keepOpen(response: ServerResponse): void {
  response.socket?.setTimeout(0);
}
