import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler, preValidationHookHandler } from 'fastify';
import { HttpError, unauthorized } from '../http/errors.js';
import type { TokenRecord, TokenRole } from '../schemas/token.js';
import { decide, isExpired, routeAccess, serviceOf, type Access, type RouteAccess, type ServiceSource } from './access.js';
import { bearerToken, cameOverHttps, callerKey, isLocalCall, sessionCredential } from './caller.js';
import { checkSession, sessionCookie, type SessionCredential } from './session.js';
import { knownPeerOf } from './loopback-peer.js';
import type { TokenCache } from './token-cache.js';
import type { FailureLimiter } from './failure-limiter.js';
import type { EndedSessions } from './ended-sessions.js';
import type { HostRule } from '../http/host-rule.js';
import { appendHook } from '../http/route-hooks.js';

// The check every role server runs on every call (installed once, in src/http/server.ts):
// authentication on request (401), then the route's right on the service the call names (403),
// after the body is parsed when the service is named in the body.

declare module 'fastify' {
  interface FastifyContextConfig {
    access?: Access;
    service?: ServiceSource;
  }
  interface FastifyInstance {
    /** The role's access control, for what outlives the check at arrival (streams end with their credentials). */
    accessControl: AccessControl;
  }
  interface FastifyRequest {
    /** Who made the call (set by the access check): its token, `local` for a local call under auto, else null. */
    caller: TokenRecord | 'local' | null;
  }
}

export type AuthMode = 'auto' | 'token' | 'none';
export const authModes: readonly AuthMode[] = ['auto', 'token', 'none'];

export interface AccessControl {
  /** auto: local calls need no token, others do; token: every call does; none: nothing is checked. */
  mode: AuthMode;
  /** The watched token records; needed unless the mode is none. */
  tokens?: TokenCache;
  /** Whether the role listens on a loopback address (a condition of a local call). */
  listenerLoopback: boolean;
  /** Addresses that failed to authenticate too often are refused with 429; absent: never. */
  failures?: FailureLimiter;
  /** The key dashboard sessions are signed with (src/auth/session.ts); absent: sessions are refused. */
  sessionKey?: Buffer;
  /** The key roles sign the callers they relay with (src/auth/relayed-caller.ts); absent: no relayed caller is believed. */
  relayKey?: Buffer;
  /** Sessions signed out before they ended (src/auth/ended-sessions.ts); needed with sessionKey. */
  endedSessions?: EndedSessions;
  /** Other origins whose pages may call with the caller's session (--cors-origin; src/http/cors.ts). */
  corsOrigins?: readonly string[];
  /** The Host names the role answers (src/http/host-rule.ts); absent only where a test builds a role server by hand. */
  hosts?: HostRule;
}

const tokenOf = (request: FastifyRequest): TokenRecord | undefined => (request.caller && request.caller !== 'local' ? request.caller : undefined);

/** The token a call was authenticated with; undefined for local calls under auto and under none. */
export const callerToken = (request: FastifyRequest): TokenRecord | undefined => tokenOf(request);

/** The role of the caller's token; undefined when the call needed none (local under auto, --auth none, open routes). */
export const callerRole = (request: FastifyRequest): TokenRole | undefined => tokenOf(request)?.role;

/** Who made the call, as the journal names it: the token's name, `local` for a local call under auto, else undefined. */
export const callerName = (request: FastifyRequest): string | undefined => (request.caller === 'local' ? 'local' : request.caller?.name);

function authenticate(control: AccessControl, request: FastifyRequest, reply: FastifyReply): TokenRecord {
  const header = request.headers.authorization;
  // By the connection: a keep-alive client's next call with the same header is matched without parsing it again.
  const token = header === undefined ? undefined : control.tokens?.findBearer(header, request.raw.socket);
  const secret = token ? undefined : bearerToken(header);
  const session = token || secret !== undefined ? undefined : sessionCredential(request.headers);
  if (session) return authenticateSession(control, session, request, reply);
  const now = Date.now();
  if (token && !isExpired(token, now)) {
    control.tokens?.recordUse(token, now);
    return token;
  }
  void reply.header('www-authenticate', 'Bearer realm="platform"');
  if (token) throw unauthorized(`token ${token.name} expired at ${token.expiresAt}`);
  if (secret === undefined) throw unauthorized(`this call needs a token: send Authorization: Bearer <token> (the CLI takes --token or PLATFORM_TOKEN)${whyNotLocal(control, request)}`);
  throw unauthorized('the token is unknown or revoked');
}

/** A session stands for its token while both last; a refused session cookie is cleared. */
function authenticateSession(
  control: AccessControl,
  session: SessionCredential & { from: 'cookie' | 'header' },
  request: FastifyRequest,
  reply: FastifyReply,
): TokenRecord {
  const { sessionKey, tokens, endedSessions } = control;
  const check =
    sessionKey && tokens && endedSessions
      ? checkSession(sessionKey, session, (name) => tokens.named(name), (id) => endedSessions.has(id), Date.now())
      : { refused: 'this role accepts no sessions', proven: false };
  if ('token' in check) {
    tokens?.recordUse(check.token);
    return check.token;
  }
  // A cookie presented without its own proof may be the session of another dashboard origin on this host: left alone.
  if (session.from === 'cookie' && check.proven) void reply.header('set-cookie', sessionCookie('', 0, cameOverHttps(request)));
  throw unauthorized(check.refused);
}

/** 429 while the caller is limited, before its token is looked up. */
export function refuseWhileLimited(control: AccessControl, request: FastifyRequest, reply: FastifyReply): void | Promise<void> {
  // No caller is at its limit (the usual case, even just after a few failures): no caller to work out.
  if (!control.failures?.limitsAny()) return;
  const key = callerKey(request);
  return key instanceof Promise ? key.then((known) => refuseIfLimited(control, known, reply)) : refuseIfLimited(control, key, reply);
}

function refuseIfLimited(control: AccessControl, key: string, reply: FastifyReply): void {
  const waitMs = control.failures?.retryAfterMs(key) ?? 0;
  if (waitMs <= 0) return;
  const seconds = Math.ceil(waitMs / 1000);
  void reply.header('retry-after', String(seconds));
  throw new HttpError(429, `too many failed authentications from ${key}: try again in ${seconds} s`);
}

/** Counts a failed authentication (a token, a session, a webhook's secret) against its caller. */
export async function countFailure(control: AccessControl, request: FastifyRequest): Promise<void> {
  if (control.failures) control.failures.recordFailure(await callerKey(request));
}

/** Counts a failed authentication against its caller, then fails with `error`. */
export async function recordFailure(control: AccessControl, request: FastifyRequest, error: unknown): Promise<never> {
  await countFailure(control, request);
  throw error;
}

/** Runs `step` after `before`, synchronously when `before` is not a promise: the usual case costs no tick. */
function then(before: void | Promise<void>, step: () => void | Promise<void>): void | Promise<void> {
  return before instanceof Promise ? before.then(step) : step();
}

function authenticateAndAuthorize(control: AccessControl, need: RouteAccess, request: FastifyRequest, reply: FastifyReply): void | Promise<void> {
  return then(refuseWhileLimited(control, request, reply), () => {
    let token: TokenRecord;
    try {
      token = authenticate(control, request, reply);
    } catch (error) {
      // Only a refused credential counts against its caller: a check the store could not answer
      // (503 while etcd is away) is no failure of the caller's, or every client polling through an
      // outage would be refused with 429 after it (issue 30's machines, after a reboot).
      if (!(error instanceof HttpError && error.statusCode === 401)) throw error;
      return recordFailure(control, request, error);
    }
    request.caller = token;
    if (!need.service || 'param' in need.service) authorize(token, need, request);
  });
}

/** Why a loopback call under auto was not taken for a local one, when its caller could not be identified (ss missing, say). */
function whyNotLocal(control: AccessControl, request: FastifyRequest): string {
  const peer = control.mode === 'auto' ? knownPeerOf(request.raw.socket) : undefined;
  if (peer && 'unknown' in peer) return `; it was not taken for a local call: ${peer.unknown}`;
  if (peer?.cgroupUnseen !== undefined && peer.container === undefined && peer.uid !== process.getuid?.()) {
    return `; it was not taken for a local call: its process runs as uid ${peer.uid}, not as this role's user, and its cgroup is unseen (${peer.cgroupUnseen})`;
  }
  return '';
}

/** Under auto, a local call without credentials is let through as `local`; every other call shows its token. */
function checkCaller(control: AccessControl, need: RouteAccess, request: FastifyRequest, reply: FastifyReply): void | Promise<void> {
  if (control.mode !== 'auto' || presentsCredentials(request)) return authenticateAndAuthorize(control, need, request, reply);
  const decide = (local: boolean): void | Promise<void> => {
    if (!local) return authenticateAndAuthorize(control, need, request, reply);
    request.caller = 'local';
  };
  const local = isLocalCall(request, control.listenerLoopback);
  return local instanceof Promise ? local.then(decide) : decide(local);
}

function authorize(token: TokenRecord, need: RouteAccess, request: FastifyRequest): void {
  const decision = decide(token, need.access, serviceOf(need.service, request.params, request.body));
  if (!decision.allowed) throw new HttpError(decision.status, decision.message);
}

/**
 * A local call that presents a token or a session is checked anyway: the orchestrator forwards its caller's.
 * A session cookie without its proof is no credential, so it does not make a local call a checked one.
 */
const presentsCredentials = (request: FastifyRequest): boolean =>
  request.headers.authorization !== undefined ||
  // Without a cookie there is no session to read (the usual anonymous call: no parsing at all).
  (request.headers.cookie !== undefined && sessionCredential(request.headers)?.proof !== undefined);

/**
 * Whether the caller of an open route is one the role knows: any caller under none, a local call
 * under auto, or one with a valid token or session. Only they are told more than anonymous callers
 * are (/readyz's details: the store's address, the auth mode, versions).
 */
export function isKnownCaller(control: AccessControl, request: FastifyRequest, reply: FastifyReply): boolean | Promise<boolean> {
  if (control.mode === 'none') return true;
  if (!presentsCredentials(request)) return control.mode === 'auto' && isLocalCall(request, control.listenerLoopback);
  try {
    authenticate(control, request, reply);
    return true;
  } catch {
    return false;
  }
}

/**
 * Each route gets its own synchronous (done-callback) checks when it is registered, instead of a
 * global async hook, so a checked call costs little more than an unchecked one (bench/auth.ts
 * measures it against --auth none). What a route needs is read on its first call, not at registration, because
 * onRoute hooks of inner scopes (the webhooks' `open`) set it after this one has run.
 */
export function installAccessControl(server: FastifyInstance, control: AccessControl): void {
  // A decorated property, not a WeakMap keyed by request: ephemeron entries for every call cost
  // the garbage collector measurably at tens of thousands of calls a second.
  server.decorateRequest('caller', null);
  server.decorate('accessControl', control);
  if (control.mode === 'none') return;
  server.addHook('onRoute', (route) => {
    const needs = new Map<string, RouteAccess>(); // by method: a route may serve several
    const needOf = (request: FastifyRequest): RouteAccess => {
      let need = needs.get(request.method);
      if (!need) needs.set(request.method, (need = routeAccess(request.method, request.routeOptions.config)));
      return need;
    };
    const checkOnRequest: onRequestHookHandler = (request, reply, done) => {
      try {
        const need = needOf(request);
        if (need.access === 'open') return done();
        const checked = checkCaller(control, need, request, reply);
        if (!(checked instanceof Promise)) return done();
        checked.then(() => done(), (error: Error) => done(error));
      } catch (error) {
        done(error as Error);
      }
    };
    // The service some routes act on is named in the body: checked once the body is parsed.
    const checkBody: preValidationHookHandler = (request, _reply, done) => {
      const token = tokenOf(request);
      try {
        if (token) authorize(token, needOf(request), request);
        done();
      } catch (error) {
        done(error as Error);
      }
    };
    route.onRequest = appendHook(route.onRequest, checkOnRequest);
    // Only routes declaring their service in the body get the second check (a hook on every route
    // costs every call a pass of Fastify's hook runner); no scope's onRoute hook sets `service`.
    const service = (route.config as { service?: ServiceSource } | undefined)?.service;
    if (service && 'body' in service) route.preValidation = appendHook(route.preValidation, checkBody);
  });
}
