import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { TokenRecord } from '../schemas/token.js';
import { isExpired } from './access.js';

// A dashboard session: the cookie a sign-in (POST /session) sets in exchange for a token. It is
// signed with the key every role shares (src/auth/session-key.ts): it names the session, the
// token, a prefix of the token's hash and when it ends, and carries no secret. Each call looks the
// token up again, so a revoked, expired or reissued token ends its sessions at once; signing out
// records the session as ended (src/auth/ended-sessions.ts), so a copy of the cookie is refused too.
//
// The cookie alone is not a credential. Cookies belong to a host, not to a port, so the browser
// also sends it to any unit published on the dashboard's host, which could replay it. A session is
// the cookie and its proof: a MAC of the session's id that the sign-in answer gives the page, which
// keeps it in storage only its own origin (scheme, host and port) can read and sends it as the
// X-Platform-Session-Proof header. A role passing a session on sends both, as `Session <value> <proof>`.

export const SESSION_COOKIE = 'platform_session';
/** The header in which the dashboard's page sends the proof that goes with its cookie. */
export const SESSION_PROOF_HEADER = 'x-platform-session-proof';
/** A session lasts 12 hours, or until its token expires if that is sooner. */
export const SESSION_MAX_AGE_MS = 12 * 3_600_000;
/** Enough of the token's hash to tell a token from a later one of the same name. */
const HASH_PREFIX_LENGTH = 16;

export interface SessionClaims {
  /** The session's own random id: what signing out records as ended. */
  id: string;
  token: string;
  hash: string;
  /** Milliseconds since the epoch. */
  expiresAt: number;
}

const mac = (key: Buffer, payload: string): Buffer => createHmac('sha256', key).update(payload).digest();

/** A session as a call presents it: the cookie's value and the proof that goes with it, if any. */
export interface SessionCredential {
  value: string;
  proof: string | undefined;
}

/** The proof of a session: what the page sends beside the cookie. The `proof.` prefix keeps it from ever equalling a cookie's MAC. */
export const sessionProof = (key: Buffer, claims: Pick<SessionClaims, 'id'>): string => mac(key, `proof.${claims.id}`).toString('base64url');

function proves(key: Buffer, claims: SessionClaims, proof: string | undefined): boolean {
  if (proof === undefined) return false;
  const given = Buffer.from(proof, 'base64url');
  const expected = mac(key, `proof.${claims.id}`);
  return given.length === expected.length && timingSafeEqual(given, expected);
}

const WITHOUT_PROOF = `the session cookie alone is not a credential: the dashboard's page sends its proof (${SESSION_PROOF_HEADER}); sign in again`;

/** The claims of a session of `token` starting `now`. */
export function sessionClaims(token: Pick<TokenRecord, 'name' | 'hash' | 'expiresAt'>, now: number): SessionClaims {
  const tokenEnds = token.expiresAt === undefined ? Infinity : Date.parse(token.expiresAt);
  return { id: randomBytes(16).toString('base64url'), token: token.name, hash: token.hash.slice(0, HASH_PREFIX_LENGTH), expiresAt: Math.min(now + SESSION_MAX_AGE_MS, tokenEnds) };
}

/** The cookie's value: `<claims, base64url JSON>.<HMAC-SHA256 of them, base64url>`. */
export function sealSession(key: Buffer, claims: SessionClaims): string {
  const payload = Buffer.from(JSON.stringify({ i: claims.id, t: claims.token, h: claims.hash, e: claims.expiresAt })).toString('base64url');
  return `${payload}.${mac(key, payload).toString('base64url')}`;
}

/** The claims of a session this key signed, presented with its proof; undefined for anything else. Expiry is not checked here. */
export function openProvenSession(key: Buffer, credential: SessionCredential): SessionClaims | undefined {
  const claims = openSession(key, credential.value);
  return claims && proves(key, claims, credential.proof) ? claims : undefined;
}

/** The claims of a value this key signed, or undefined for anything else. Expiry is not checked here. */
export function openSession(key: Buffer, value: string): SessionClaims | undefined {
  const [payload, signature, extra] = value.split('.');
  if (!payload || !signature || extra !== undefined) return undefined;
  const given = Buffer.from(signature, 'base64url');
  const expected = mac(key, payload);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined;
  try {
    const { i, t, h, e } = JSON.parse(Buffer.from(payload, 'base64url').toString()) as Record<string, unknown>;
    return typeof i === 'string' && typeof t === 'string' && typeof h === 'string' && typeof e === 'number' ? { id: i, token: t, hash: h, expiresAt: e } : undefined;
  } catch {
    return undefined;
  }
}

/** `proven`: the refused session came with its proof, so the caller's page holds it and its cookie may be cleared. */
export type SessionCheck = { token: TokenRecord } | { refused: string; proven: boolean };

/**
 * The token a session stands for, or why it stands for none now. `find` looks a token up by name,
 * `ended` says whether the session was signed out.
 */
export function checkSession(
  key: Buffer,
  credential: SessionCredential,
  find: (name: string) => TokenRecord | undefined,
  ended: (id: string) => boolean,
  now: number,
): SessionCheck {
  const claims = openSession(key, credential.value);
  if (!claims) return { refused: 'the session is not one this platform signed: sign in again', proven: false };
  if (!proves(key, claims, credential.proof)) return { refused: WITHOUT_PROOF, proven: false };
  if (claims.expiresAt <= now) return { refused: `the session ended at ${new Date(claims.expiresAt).toISOString()}: sign in again`, proven: true };
  if (ended(claims.id)) return { refused: 'the session was signed out: sign in again', proven: true };
  return sessionToken(claims, find, now);
}

/** The token a session's claims stand for while it lasts, or why it stands for none now (revoked, reissued or expired). */
export function sessionToken(claims: SessionClaims, find: (name: string) => TokenRecord | undefined, now: number): SessionCheck {
  const token = find(claims.token);
  if (!token || !token.hash.startsWith(claims.hash)) return { refused: `the session ended: token ${claims.token} was revoked`, proven: true };
  if (isExpired(token, now)) return { refused: `the session ended: token ${token.name} expired at ${token.expiresAt}`, proven: true };
  return { token };
}

/** One cookie's value from a Cookie header. */
export function cookieValue(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/**
 * The Set-Cookie header of a session: HttpOnly (no script reads it), SameSite=Strict (no other
 * site's page sends it), Secure over HTTPS, gone after `maxAgeMs` (0 clears it).
 */
export function sessionCookie(value: string, maxAgeMs: number, secure: boolean): string {
  return [`${SESSION_COOKIE}=${value}`, 'Path=/', `Max-Age=${Math.max(0, Math.floor(maxAgeMs / 1000))}`, 'HttpOnly', 'SameSite=Strict', ...(secure ? ['Secure'] : [])].join('; ');
}
