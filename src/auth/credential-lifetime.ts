import { PassThrough, type Readable } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { callerToken } from './guard.js';
import { isExpired } from './access.js';
import { presentedSession } from './caller.js';

// A call is checked when it arrives, but a stream (the dashboard's events, a followed log) lasts for hours: it
// must end when what let it in does, so revoking a token, a token or session expiring, or signing
// the session out also cuts the streams it opened, as the next call would be refused.

/** The longest timer Node keeps (about 24.8 days); a later end is checked again then. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Calls `end` once the caller's token is revoked or reissued, it or the session expires, or the session is signed out; returns what stops watching. */
export function untilCredentialsEnd(request: FastifyRequest, end: () => void): () => void {
  const access = request.server.accessControl;
  const token = callerToken(request);
  const { tokens } = access;
  if (!token || !tokens) return () => undefined;
  const claims = presentedSession(request.headers, access.sessionKey);
  const endsAt = Math.min(claims?.expiresAt ?? Infinity, token.expiresAt === undefined ? Infinity : Date.parse(token.expiresAt));
  const { endedSessions } = access;
  let timer: NodeJS.Timeout | undefined;
  const check = (): void => {
    let current;
    let signedOut;
    try {
      current = tokens.named(token.name);
      signedOut = claims !== undefined && endedSessions !== undefined && endedSessions.has(claims.id);
    } catch {
      return; // the store is unreachable: the stream's own watches report that
    }
    if (!current || current.hash !== token.hash || isExpired(current, Date.now()) || endsAt <= Date.now() || signedOut) {
      stop();
      end();
    }
  };
  const unsubscribers = [tokens.onChange(check), ...(claims && endedSessions ? [endedSessions.onChange(check)] : [])];
  const schedule = (): void => {
    if (endsAt === Infinity) return;
    timer = setTimeout(() => {
      check();
      if (timer) schedule();
    }, Math.min(MAX_TIMER_MS, Math.max(0, endsAt - Date.now())));
    timer.unref();
  };
  const stop = (): void => {
    for (const unsubscribe of unsubscribers) unsubscribe();
    clearTimeout(timer);
    timer = undefined;
  };
  schedule();
  return stop;
}

/**
 * What a followed stream (a unit's log tail) sends: `source` until the client leaves or the
 * caller's credentials end, whichever is first. It then ends cleanly (the client sees the end of
 * the text, not a broken connection) and `source` is destroyed, so the engine stops sending.
 */
export function followedWhileCredentialsLast(request: FastifyRequest, reply: FastifyReply, source: Readable): Readable {
  const sent = new PassThrough();
  const passOnError = (error: Error): void => void sent.destroy(error);
  source.once('error', passOnError);
  source.pipe(sent);
  const stopWatching = untilCredentialsEnd(request, () => {
    // Destroying an HTTP body before its end raises an abort error: expected here, not the client's to see.
    source.off('error', passOnError).on('error', () => undefined);
    source.unpipe(sent);
    source.destroy();
    sent.end();
  });
  reply.raw.once('close', () => {
    stopWatching();
    source.destroy();
  });
  return sent;
}
