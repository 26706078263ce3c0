import type { IncomingMessage } from 'node:http';

// A body over a route's limit is answered 413 and its connection closed. Answered while the client
// is still sending, most clients fail on their next write (EPIPE, ECONNRESET: undici's "fetch
// failed") before they read the answer. So, as nginx and HAProxy do, the rest of the body is read
// and dropped first, up to a bound: a client sending a moderately oversized body reads its 413;
// one announcing or sending more than the bound, or sending too slowly, sees the connection close.

export interface DiscardBound {
  /** Bytes read and dropped at most; a body whose Content-Length says more is not read at all. */
  bytes: number;
  /** How long to keep reading. */
  ms: number;
}

export const OVERSIZED_BODY_DISCARD: DiscardBound = { bytes: 8 * 1024 * 1024, ms: 10_000 };

/** Reads and drops what remains of `request`'s body; resolves once it ended or the bound is reached. */
export function discardBody(request: IncomingMessage, bound: DiscardBound = OVERSIZED_BODY_DISCARD): Promise<void> {
  if (request.complete || request.destroyed || Number(request.headers['content-length']) > bound.bytes) return Promise.resolve();
  return new Promise((resolve) => {
    let read = 0;
    const onData = (chunk: Buffer) => {
      read += chunk.length;
      if (read > bound.bytes) done();
    };
    const done = () => {
      clearTimeout(timer);
      request.off('data', onData).off('end', done).off('close', done).off('error', done);
      request.pause();
      resolve();
    };
    const timer = setTimeout(done, bound.ms);
    request.on('data', onData).once('end', done).once('close', done).once('error', done);
    request.resume();
  });
}
