import type { IncomingHttpHeaders } from 'node:http';
import type { FastifyRequest } from 'fastify';
import { cookieValue, openProvenSession, SESSION_COOKIE, SESSION_PROOF_HEADER, type SessionClaims, type SessionCredential } from './session.js';

// Who is calling: the bearer token or dashboard session a request presents, and whether it was made on this machine.
// The one rule of "a local call needs no credentials" lives here, for the API's tokens
// (src/auth/guard.ts) and the registry webhooks' secrets (src/roles/scheduler/webhooks/auth.ts).

const BEARER = /^Bearer\s+(\S+)\s*$/i;
const WHITESPACE = /\s/;

/** The token of an `Authorization: Bearer <token>` header. */
export function bearerToken(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  // The form every client sends, read on every call without building a match: the same answer as BEARER's.
  if (header.startsWith('Bearer ')) {
    const token = header.slice(7);
    if (token !== '' && !WHITESPACE.test(token)) return token;
  }
  return BEARER.exec(header)?.[1];
}

/**
 * A dashboard session: the browser's cookie with the proof its page sends (src/auth/session.ts),
 * or `Authorization: Session <value> <proof>` where a role passes its caller's session on to
 * another (the orchestrator, the web role).
 */
export function sessionCredential(headers: IncomingHttpHeaders): (SessionCredential & { from: 'cookie' | 'header' }) | undefined {
  const passedOn = /^Session\s+(\S+)(?:\s+(\S+))?\s*$/i.exec(headers.authorization ?? '');
  if (passedOn) return { value: passedOn[1]!, proof: passedOn[2], from: 'header' };
  const cookie = cookieValue(headers.cookie, SESSION_COOKIE);
  const proof = headers[SESSION_PROOF_HEADER];
  return cookie ? { value: cookie, proof: typeof proof === 'string' ? proof : undefined, from: 'cookie' } : undefined;
}

/** The claims of the dashboard session a request presents, with its proof, instead of a bearer token, if `sessionKey` signed it. */
export function presentedSession(headers: IncomingHttpHeaders, sessionKey: Buffer | undefined): SessionClaims | undefined {
  if (!sessionKey || bearerToken(headers.authorization) !== undefined) return undefined;
  const session = sessionCredential(headers);
  return session ? openProvenSession(sessionKey, session) : undefined;
}

/** What a role passes on for its caller: the caller's Authorization header, or its session as `Session <value> <proof>`. */
export function passedOnAuthorization(headers: IncomingHttpHeaders): string | undefined {
  if (headers.authorization !== undefined) return headers.authorization;
  const session = sessionCredential(headers);
  return session ? ['Session', session.value, ...(session.proof === undefined ? [] : [session.proof])].join(' ') : undefined;
}

/** Whether the caller reached us over HTTPS, itself or through a proxy that ends TLS (the gateway). */
export const cameOverHttps = (request: Pick<FastifyRequest, 'protocol' | 'headers'>): boolean =>
  request.protocol === 'https' || request.headers['x-forwarded-proto'] === 'https';

const LOOPBACK = /^(127\.\d{1,3}\.\d{1,3}\.\d{1,3}|::1|::ffff:127\.\d{1,3}\.\d{1,3}\.\d{1,3}|localhost)$/i;

/** A listen address or peer address that only this machine can reach. */
export const isLoopback = (host: string | undefined): boolean => LOOPBACK.test((host ?? '').replace(/^\[|\]$/g, ''));

/** A request made on this machine, not relayed by a proxy (the gateway and the web role add X-Forwarded-For). */
export const isLocalRequest = (request: Pick<FastifyRequest, 'socket' | 'headers'>): boolean =>
  isLoopback(request.socket.remoteAddress) && request.headers['x-forwarded-for'] === undefined && request.headers.forwarded === undefined;

/**
 * The address a call comes from, seen through one proxy of this machine: a role that passes calls
 * on (the web role to the orchestrator, the orchestrator to the directory and scheduler) appends
 * the address it saw to X-Forwarded-For. Only a loopback peer is believed, and only its last
 * entry, the one it added: anyone else could write any address there. Failed authentications are
 * counted, and changes journaled, against this address, so one client's bad tokens through the
 * web role do not lock every dashboard user out.
 */
export function clientAddress(request: Pick<FastifyRequest, 'ip' | 'socket' | 'headers'>): string {
  const forwarded = request.headers['x-forwarded-for'];
  if (forwarded === undefined || !isLoopback(request.socket.remoteAddress)) return request.ip;
  const last = (Array.isArray(forwarded) ? forwarded.join(',') : forwarded).split(',').pop()?.trim();
  return last || request.ip;
}

/**
 * A call only this machine could have made: it arrived on a loopback listener, from a loopback
 * peer, and no proxy forwarded it. Such calls need no credentials where the operator allows it.
 */
export const isLocalCall = (request: Pick<FastifyRequest, 'socket' | 'headers'>, listenerLoopback: boolean): boolean =>
  listenerLoopback && isLocalRequest(request);
