import type { FastifyRequest } from 'fastify';
import { callerToken, type AccessControl } from './guard.js';
import { isExpired } from './access.js';
import { bearerToken, sessionCredential } from './caller.js';
import { openSession } from './session.js';

// A call is checked when it arrives, but a stream (the dashboard's events) lasts for hours: it
// must end when what let it in does, so revoking a token, or a token or session expiring, also
// cuts the streams it opened, as the next call would be refused.

/** The longest timer Node keeps (about 24.8 days); a later end is checked again then. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Calls `end` once the caller's token is revoked or reissued, or it or the session expires; returns what stops watching. */
export function untilCredentialsEnd(request: FastifyRequest, access: AccessControl, end: () => void): () => void {
  const token = callerToken(request);
  const { tokens } = access;
  if (!token || !tokens) return () => undefined;
  const session = bearerToken(request.headers.authorization) === undefined ? sessionCredential(request.headers) : undefined;
  const sessionEnds = session && access.sessionKey ? openSession(access.sessionKey, session.value)?.expiresAt : undefined;
  const endsAt = Math.min(sessionEnds ?? Infinity, token.expiresAt === undefined ? Infinity : Date.parse(token.expiresAt));
  let timer: NodeJS.Timeout | undefined;
  const check = (): void => {
    let current;
    try {
      current = tokens.named(token.name);
    } catch {
      return; // the store is unreachable: the stream's own watches report that
    }
    if (!current || current.hash !== token.hash || isExpired(current, Date.now()) || endsAt <= Date.now()) {
      stop();
      end();
    }
  };
  const unsubscribe = tokens.onChange(check);
  const schedule = (): void => {
    if (endsAt === Infinity) return;
    timer = setTimeout(() => {
      check();
      if (timer) schedule();
    }, Math.min(MAX_TIMER_MS, Math.max(0, endsAt - Date.now())));
    timer.unref();
  };
  const stop = (): void => {
    unsubscribe();
    clearTimeout(timer);
    timer = undefined;
  };
  schedule();
  return stop;
}
