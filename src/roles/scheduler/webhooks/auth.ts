import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { HttpError, unauthorized } from '../../../http/errors.js';
import { isLocalCall } from '../../../auth/caller.js';
import { refuseWhileLimited } from '../../../auth/guard.js';
import type { HookKind } from './matching.js';

// Who may call a hook. With a secret configured, only callers that present it (a bearer token, a
// URL token, an HMAC signature); wrong ones count against the caller as wrong tokens do (429 at
// the limit). Without one, only local callers (src/auth/caller.ts: a loopback listener, a
// loopback peer, no proxy, and no unit, on host networking or not); everyone else gets 403
// saying which secret to set.

export interface HookSecret {
  hook: HookKind;
  /** The configured secret; undefined when none is. */
  secret: string | undefined;
  /** How an operator sets it, for messages: `PLATFORM_… (--…)`. */
  setting: string;
}

const digestOf = (value: string | Buffer): Buffer => createHash('sha256').update(value).digest();

/** Constant-time comparison of a presented secret with the configured one (hashed first, so lengths never leak). */
export const secretMatches = (presented: string, expected: string): boolean => timingSafeEqual(digestOf(presented), digestOf(expected));

/** GitHub's `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>`, compared in constant time. */
export function githubSignatureValid(secret: string, rawBody: Buffer, header: string | undefined): boolean {
  const match = /^sha256=([0-9a-f]{64})$/i.exec(header?.trim() ?? '');
  if (!match) return false;
  const expected = createHmac('sha256', secret).update(rawBody).digest();
  return timingSafeEqual(Buffer.from(match[1]!.toLowerCase(), 'hex'), expected);
}

export const forbiddenWithoutSecret = (spec: HookSecret, route: string): HttpError =>
  new HttpError(403, `${route} accepts calls from other hosts only with a secret: set ${spec.setting}`);

/**
 * The onRequest check of a hook. `presented` reads the caller's secret from the request; without it
 * (GitHub's signature needs the body) only the no-secret rule is checked here.
 */
export function hookAccess(spec: HookSecret, route: string, listenerLoopback: boolean, presented?: (request: FastifyRequest) => string | undefined) {
  return async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    // Guessing a hook's secret costs what guessing a token does: a caller at its limit is refused before its secret is compared.
    await refuseWhileLimited(request.server.accessControl, request, reply);
    if (spec.secret === undefined) {
      if (!(await isLocalCall(request, listenerLoopback))) throw forbiddenWithoutSecret(spec, route);
      return;
    }
    if (!presented) return;
    const given = presented(request);
    if (given !== undefined && secretMatches(given, spec.secret)) return;
    const bearer = spec.hook === 'registry';
    if (bearer) void reply.header('www-authenticate', 'Bearer realm="platform"');
    if (given === undefined) throw unauthorized(`${route} needs its secret: ${bearer ? 'an Authorization: Bearer header' : 'a ?token= parameter'}`);
    throw unauthorized(`${route}: the ${bearer ? 'bearer token' : 'token'} is wrong`);
  };
}

/** The warning logged at start for each hook that accepts unauthenticated calls, or none at all. */
export function openHookWarning(spec: HookSecret, route: string, listenerLoopback: boolean): string | undefined {
  if (spec.secret !== undefined) return undefined;
  return listenerLoopback
    ? `${route} accepts unauthenticated calls from this machine: set ${spec.setting} before exposing it`
    : `${route} answers 403 until a secret is set: ${spec.setting}`;
}
