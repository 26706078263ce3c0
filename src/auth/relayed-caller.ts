import { createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';

// A role that passes a call on for its caller (the web role to the orchestrator, the orchestrator
// to the directory and scheduler) names the caller it saw, so the peer counts failed
// authentications and journals changes against that caller and not against the relaying role.
// X-Forwarded-For cannot carry this: any local process (a unit on host networking included) can
// write it. The name goes with an HMAC under a key derived from the session key in the store,
// which only the roles read (the store is the trust root): nobody else can name a caller.

export const RELAYED_CALLER_HEADER = 'x-platform-caller';
export const RELAYED_CALLER_SIGNATURE_HEADER = 'x-platform-caller-signature';

const MAX_CALLER_LENGTH = 200;

/** The relay key: its own key, so a relay signature can never stand for a session's or the reverse. */
export const relayKeyOf = (sessionKey: Buffer): Buffer => createHmac('sha256', sessionKey).update('platform relayed caller v1').digest();

const signatureOf = (key: Buffer, caller: string): Buffer => createHmac('sha256', key).update(caller).digest();

/** The headers naming `caller` to a peer. */
export function relayedCallerHeaders(key: Buffer, caller: string): Record<string, string> {
  const named = caller.slice(0, MAX_CALLER_LENGTH);
  return { [RELAYED_CALLER_HEADER]: named, [RELAYED_CALLER_SIGNATURE_HEADER]: signatureOf(key, named).toString('base64url') };
}

/** The caller a role of this platform named, if the signature is the relay key's; else undefined. */
export function verifiedRelayedCaller(headers: IncomingHttpHeaders, key: Buffer | undefined): string | undefined {
  const caller = headers[RELAYED_CALLER_HEADER];
  const signature = headers[RELAYED_CALLER_SIGNATURE_HEADER];
  if (!key || typeof caller !== 'string' || typeof signature !== 'string' || caller.length > MAX_CALLER_LENGTH) return undefined;
  const presented = Buffer.from(signature, 'base64url');
  const expected = signatureOf(key, caller);
  return presented.length === expected.length && timingSafeEqual(presented, expected) ? caller : undefined;
}

/** Whether a request names a relayed caller at all (signed or not): such a call was passed on, so it is not local. */
export const namesRelayedCaller = (headers: IncomingHttpHeaders): boolean => headers[RELAYED_CALLER_HEADER] !== undefined;
