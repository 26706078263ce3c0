import type { IncomingHttpHeaders } from 'node:http';
import type { FastifyRequest } from 'fastify';
import { cookieValue, openProvenSession, SESSION_COOKIE, SESSION_PROOF_HEADER, type SessionClaims, type SessionCredential } from './session.js';
import { loopbackPeerOf, type PeerIdentity } from './loopback-peer.js';
import { namesRelayedCaller, verifiedRelayedCaller } from './relayed-caller.js';

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

const LOOPBACK_PEER = Symbol('loopbackPeerAddress');

/**
 * Whether a connection comes from this machine's own address: a loopback peer, or one whose
 * address is the one it connected to (a role listening on the machine's private address, as the
 * units do, is reached there from the machine itself: no other host can complete a connection
 * from our own address). Read once per connection (its addresses do not change).
 */
const fromLoopbackAddress = (socket: FastifyRequest['socket']): boolean => {
  const known = socket as typeof socket & { [LOOPBACK_PEER]?: boolean };
  return (known[LOOPBACK_PEER] ??= isLoopback(socket.remoteAddress) || (socket.remoteAddress !== undefined && socket.remoteAddress === socket.localAddress));
};

/** A request from a loopback peer, not relayed by a proxy (the gateway adds X-Forwarded-For) nor by a role (which names its caller). */
const isLocalRequest = (request: Pick<FastifyRequest, 'socket' | 'headers'>): boolean =>
  request.headers['x-forwarded-for'] === undefined &&
  request.headers.forwarded === undefined &&
  !namesRelayedCaller(request.headers) &&
  fromLoopbackAddress(request.socket);

type CallerRequest = Pick<FastifyRequest, 'ip' | 'socket' | 'headers'> & { server?: { accessControl?: { relayKey?: Buffer } } };

const relayedCaller = (request: CallerRequest): string | undefined => verifiedRelayedCaller(request.headers, request.server?.accessControl?.relayKey);

/** The last X-Forwarded-For entry: the one the proxy in front of us added. */
const lastForwardedFor = (headers: IncomingHttpHeaders): string | undefined => {
  const forwarded = headers['x-forwarded-for'];
  if (forwarded === undefined) return undefined;
  return (Array.isArray(forwarded) ? forwarded.join(',') : forwarded).split(',').pop()?.trim() || undefined;
};

/** A process of this machine, in no container, running as the platform's own user: a role (the gateway), or one who could run one. */
const isPlatformProcess = (peer: PeerIdentity): boolean => !('unknown' in peer) && peer.container === undefined && peer.uid === process.getuid?.();

function keyOfPeer(request: CallerRequest, peer: PeerIdentity): string {
  // The gateway in front of this role names its client the only way it can: this machine's processes of our user are believed.
  const forwardedFor = isPlatformProcess(peer) ? lastForwardedFor(request.headers) : undefined;
  if (forwardedFor !== undefined) return forwardedFor;
  if ('unknown' in peer) return `${request.ip} unidentified`;
  return peer.container ? `${request.ip} container ${peer.container}` : `${request.ip} uid ${peer.uid}`;
}

/**
 * Who a call comes from, as failed authentications are counted: the caller a role of this
 * platform relayed (signed, src/auth/relayed-caller.ts), else the peer; a loopback peer is told
 * apart by its uid or its container, so one local process's bad tokens lock out neither the
 * operator's CLI nor a remote dashboard user. X-Forwarded-For is believed only from a process of
 * this machine running as the platform's user (the gateway): any other process can write anything there.
 */
export function callerKey(request: CallerRequest): string | Promise<string> {
  const relayed = relayedCaller(request);
  if (relayed !== undefined) return relayed;
  if (!isLoopback(request.ip)) return request.ip;
  const peer = loopbackPeerOf(request.socket);
  return peer instanceof Promise ? peer.then((known) => keyOfPeer(request, known)) : keyOfPeer(request, peer);
}

/** The address a call comes from, for the journal: the relayed caller's, else the peer's. */
export const clientAddress = (request: CallerRequest): string => relayedCaller(request)?.split(' ')[0] ?? request.ip;

/**
 * The operator's own process: identified, and in no container (a unit, on host networking too,
 * always runs in one). Where the caller's cgroup cannot be seen (this role runs in a container of
 * its own), only a caller of this process's own user is: host-network units run as another
 * (`--host-network-user`, 65534 by default), bridge-network units never share this loopback.
 */
const isOperatorProcess = (peer: PeerIdentity): boolean =>
  !('unknown' in peer) && peer.container === undefined && (peer.cgroupUnseen === undefined || peer.uid === process.getuid?.());

/**
 * A call made on this machine by one of its own processes: from a loopback peer, passed on by
 * no proxy or role, and not from a unit (a unit on host networking shares the host's loopback,
 * so the peer's socket is asked for its container, src/auth/loopback-peer.ts). Whatever the listener.
 */
export function isFromThisMachine(request: Pick<FastifyRequest, 'socket' | 'headers'>): boolean | Promise<boolean> {
  if (!isLocalRequest(request)) return false;
  const peer = loopbackPeerOf(request.socket);
  return peer instanceof Promise ? peer.then(isOperatorProcess) : isOperatorProcess(peer);
}

/**
 * A call only this machine's own processes could have made, arriving on a loopback listener:
 * such calls need no credentials where the operator allows it (--auth auto, webhooks without a secret).
 * Decided once per connection; the answer is a promise only while the connection's first lookup runs.
 */
export const isLocalCall = (request: Pick<FastifyRequest, 'socket' | 'headers'>, listenerLoopback: boolean): boolean | Promise<boolean> =>
  listenerLoopback && isFromThisMachine(request);
