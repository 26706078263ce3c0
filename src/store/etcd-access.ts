// How a process looks at etcd before its roles start. A mistake in how it reaches etcd (an
// untrusted server certificate, a missing or refused client certificate, a wrong password, a user
// without access) stops the start with a message naming etcd and the cause: those never heal by
// waiting. An etcd that is merely down, or has no quorum yet (its members still starting after a
// reboot of every machine), is not a configuration error: the start waits for it (openStore), with
// a pause between looks that grows to ETCD_WAIT_MAX_PAUSE_MS, so thirty roles starting at once do
// not exit on their first missed deadline and queue up as restarts (issue 30).
//
// gRPC reports every TLS failure as "unavailable", often with no cause at all, so when a call
// fails this way each https:// URL is probed with a plain TLS handshake that says what went wrong.

import { connect, type ConnectionOptions } from 'node:tls';
import {
  EtcdAuthenticationFailedError,
  EtcdInvalidAuthTokenError,
  EtcdPermissionDeniedError,
  GRPCInvalidArgumentError,
  GRPCUnauthenticatedError,
} from 'etcd3';
import type { EtcdSecurity } from './etcd-store.js';
import type { Store } from './store.js';
import { doublingDelayMs } from '../doubling-delay.js';

/** The process cannot use etcd as configured; the message names etcd and the cause, never a password. */
export class EtcdAccessError extends Error {
  override name = 'EtcdAccessError';
}

const PROBE_TIMEOUT_MS = 3000;
const ETCD_DEFAULT_PORT = 2379;
/** Socket errors of a server that is down or out of reach, as opposed to one that refused us. */
const unreachableCodes = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);
// The HTTP/2 client preface and an empty SETTINGS frame: a server that accepted the handshake,
// client certificate included, answers them; one that rejected it sends a TLS alert instead.
const http2Preface = Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0])]);

export type Probe = { reachable: true } | { reachable: false; cause: string } | { refused: string };

/** What one look at etcd found: it answers, or it is only out of reach for now (and why). */
export type EtcdAccess = { reachable: true } | { reachable: false; cause: string };

/** The first pause between two looks at an unreachable etcd at start, doubled after each look. */
const ETCD_WAIT_FIRST_PAUSE_MS = 250;
/** The longest pause: a member that comes up is found within this. */
export const ETCD_WAIT_MAX_PAUSE_MS = 5_000;

/** The pause after look number `look` (1-based) at an etcd that did not answer: 250 ms, 500 ms, 1 s, … at most 5 s. */
export function etcdWaitPauseMs(look: number): number {
  return doublingDelayMs(look, ETCD_WAIT_FIRST_PAUSE_MS, ETCD_WAIT_MAX_PAUSE_MS);
}

/**
 * One look at etcd: resolves with whether it answers (a linearizable read: a leader and a quorum)
 * or is only unreachable, and why; throws EtcdAccessError when it refuses this process's
 * certificate, CA or login. Takes at most ~5 s.
 */
export async function checkEtcdAccess(store: Store, urls: string[], security: EtcdSecurity): Promise<EtcdAccess> {
  let failure: unknown;
  try {
    await store.ping();
    return { reachable: true };
  } catch (error) {
    failure = error instanceof Error && error.cause !== undefined ? error.cause : error;
  }
  const refusal = loginRefusal(failure, security);
  if (refusal) throw new EtcdAccessError(`etcd at ${urls.join(',')}: ${refusal}`);
  const probes = await Promise.all(urls.map(async (url) => ({ url, probe: await probeTls(url, security) })));
  for (const { url, probe } of probes) {
    if ('refused' in probe) throw new EtcdAccessError(`etcd at ${url}: TLS handshake failed: ${probe.refused}`);
  }
  const cause = probes.map(({ probe }) => ('cause' in probe ? probe.cause : undefined)).find(Boolean) ?? (failure instanceof Error ? failure.message : String(failure));
  return { reachable: false, cause };
}

/** Why etcd refused a call for this process's login, or undefined for a failure waiting may heal. */
export function loginRefusal(error: unknown, security: EtcdSecurity): string | undefined {
  const user = security.user ? `user ${JSON.stringify(security.user.name)}` : undefined;
  if (error instanceof EtcdAuthenticationFailedError) return `authentication failed for ${user ?? 'the client'}: wrong user name or password`;
  if (error instanceof EtcdPermissionDeniedError) {
    return user
      ? `permission denied: ${user} may not read /platform/ (grant it a role with readwrite on the /platform/ prefix)`
      : 'permission denied: etcd has authentication enabled; give --etcd-user and its password (PLATFORM_ETCD_PASSWORD or --etcd-password-file)';
  }
  // With authentication on, etcd answers a call that carries no user with "invalid argument: user name is empty".
  if (error instanceof GRPCInvalidArgumentError || error instanceof GRPCUnauthenticatedError || error instanceof EtcdInvalidAuthTokenError) {
    return `refused the call (${error.message.replace(/^\S*Error: /, '')}); does etcd have authentication enabled without --etcd-user?`;
  }
  return undefined;
}

/** A TLS handshake with etcd's client port, with the same CA and client certificate gRPC uses. */
function probeTls(url: string, security: EtcdSecurity): Promise<Probe> {
  const parsed = new URL(url);
  if (parsed.protocol !== 'https:') return Promise.resolve({ reachable: true });
  const options: ConnectionOptions = {
    host: parsed.hostname.replace(/^\[(.*)\]$/, '$1'),
    port: Number(parsed.port || ETCD_DEFAULT_PORT),
    ALPNProtocols: ['h2'],
    ...(security.ca ? { ca: security.ca } : {}),
    ...(security.cert && security.key ? { cert: security.cert, key: security.key } : {}),
  };
  return new Promise((resolve) => {
    const socket = connect(options);
    const done = (probe: Probe): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(probe);
    };
    const timer = setTimeout(() => done({ reachable: false, cause: `no TLS answer within ${PROBE_TIMEOUT_MS} ms` }), PROBE_TIMEOUT_MS);
    socket.once('secureConnect', () => socket.write(http2Preface));
    socket.once('data', () => done({ reachable: true }));
    socket.once('close', () => done({ reachable: false, cause: 'the connection closed during the TLS handshake' }));
    socket.once('error', (error: NodeJS.ErrnoException) => done(classifyTlsFailure(error, security)));
  });
}

/** What a failed TLS handshake with etcd says: out of reach for now, or a refusal no wait heals. */
export function classifyTlsFailure(error: NodeJS.ErrnoException, security: EtcdSecurity): Probe {
  const code = error.code ?? '';
  if (unreachableCodes.has(code)) return { reachable: false, cause: error.message };
  const alert = /^ERR_SSL_(?:SSLV3|TLSV1|TLSV13)_ALERT_(.+)$/.exec(code)?.[1]?.toLowerCase().replaceAll('_', ' ');
  if (alert) {
    return {
      refused: security.cert
        ? `etcd rejected the client certificate (TLS alert "${alert}"); is --etcd-cert signed by a CA in etcd's --trusted-ca-file?`
        : `etcd asks for a client certificate (TLS alert "${alert}"); give --etcd-cert and --etcd-key`,
    };
  }
  if (code === 'ERR_SSL_WRONG_VERSION_NUMBER') return { refused: `etcd does not speak TLS on this port (${error.message}); use an http:// URL` };
  const remedy = security.ca ? 'is --etcd-ca the CA that signed etcd\'s certificate?' : 'give the CA that signed etcd\'s certificate with --etcd-ca';
  return { refused: `etcd's certificate is not trusted (${error.message}); ${remedy}` };
}
