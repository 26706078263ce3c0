import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer, type ServerOptions as HttpsOptions } from 'node:https';
import type { Socket } from 'node:net';
import { Counter, Gauge } from 'prom-client';
import { metricsRegistry } from './metrics.js';
import type { HttpLimitsConfig } from '../config.js';

// Every role's HTTP server is built here, so no role holds a connection forever: a request head
// must arrive within the headers timeout, the whole request (head and body) within the request
// timeout (both answered 408 and closed by Node), a connection where nothing moves is closed after
// the idle timeout, and an idle keep-alive connection after the keep-alive timeout. Long-lived
// streams (event streams, log tails) lift the idle timeout for their connection (stream-limit.ts).
//
// Connections are capped in total and per client address. As nginx's limit_conn does, a
// connection over a cap is answered 503 with Retry-After, naming the cap, and closed; it never
// reaches the role, and costs nothing past a short grace for the client to read the answer.

export interface ConnectionLimits {
  /** A request head must arrive within this (408 after). */
  headersTimeoutMs: number;
  /** A whole request, head and body, must arrive within this (408 after). */
  requestTimeoutMs: number;
  /** A connection where nothing is read or written for this long is closed; 0 leaves it open. */
  idleTimeoutMs: number;
  /** An idle keep-alive connection between requests is closed after this. */
  keepAliveTimeoutMs: number;
  /** Connections open at once to this server; more are answered 503. */
  maxConnections: number;
  /** Connections open at once from one client address; more are answered 503. */
  maxConnectionsPerAddress: number;
}

/**
 * The API roles' defaults: small JSON bodies (1 MB at most) arrive well within 30 s; the longest
 * handler (DELETE /services/:name, waiting 90 s for units to stop) stays under the idle timeout;
 * the keep-alive timeout is Fastify's own, above the 60 s idle timeout of common load balancers.
 */
export const defaultConnectionLimits: ConnectionLimits = {
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  idleTimeoutMs: 120_000,
  keepAliveTimeoutMs: 72_000,
  maxConnections: 2048,
  maxConnectionsPerAddress: 256,
};

/** The gateway takes uploads to services: a whole request may take Node's own default, 5 minutes. */
const GATEWAY_REQUEST_TIMEOUT_MS = 300_000;

/** An API role's limits from the flags (docs/security.md "Limits a client can hit"). */
export function apiConnectionLimits(settings: HttpLimitsConfig): ConnectionLimits {
  const headersTimeoutMs = settings.headersTimeoutSeconds * 1000;
  return {
    ...defaultConnectionLimits,
    headersTimeoutMs,
    requestTimeoutMs: settings.bodyTimeoutSeconds === undefined ? Math.max(defaultConnectionLimits.requestTimeoutMs, headersTimeoutMs) : settings.bodyTimeoutSeconds * 1000,
    maxConnections: settings.maxConnections,
    maxConnectionsPerAddress: settings.maxConnectionsPerAddress,
  };
}

/**
 * The gateway's: its proxy closes idle keep-alive connections and silent upstream bodies after its
 * own --idle-timeout, and a quiet WebSocket or long poll is no stalled client, so no idle timeout.
 */
export function gatewayConnectionLimits(settings: HttpLimitsConfig, idleTimeoutMs: number): ConnectionLimits {
  return {
    ...apiConnectionLimits(settings),
    requestTimeoutMs: settings.bodyTimeoutSeconds === undefined ? GATEWAY_REQUEST_TIMEOUT_MS : settings.bodyTimeoutSeconds * 1000,
    idleTimeoutMs: 0,
    keepAliveTimeoutMs: idleTimeoutMs,
  };
}

/** Seconds a refused client is asked to wait. */
export const REFUSED_RETRY_AFTER_SECONDS = 5;

/** How long a refused connection may take to send its request and read the 503. */
const REFUSAL_GRACE_MS = 2_000;

const openGauge = new Gauge({
  name: 'platform_http_connections',
  help: 'Client connections open to a role server.',
  labelNames: ['role'],
  registers: [metricsRegistry],
});

const refusedCounter = new Counter({
  name: 'platform_http_connections_refused_total',
  help: 'Client connections answered 503 because a connection cap was reached (limit: total or address).',
  labelNames: ['role', 'limit'],
  registers: [metricsRegistry],
});

type Handler = (request: IncomingMessage, response: ServerResponse) => void;

/**
 * A Node HTTP server with `limits` applied; `role` names it in refusals and metrics. With `tls`,
 * an HTTPS server (the gateway's TLS listener); the caps count TCP connections before the handshake.
 */
export function createLimitedServer(role: string, limits: ConnectionLimits, handler: Handler, options: { maxHeaderSize?: number; tls?: HttpsOptions } = {}): Server {
  const { tls, ...http } = options;
  const settings = {
    ...http,
    noDelay: true,
    headersTimeout: limits.headersTimeoutMs,
    requestTimeout: limits.requestTimeoutMs,
    // Node checks the two timeouts above on this interval (30 s by default, which would let a
    // slow client outlive a 10 s headers timeout by 30 s).
    connectionsCheckingInterval: Math.min(1_000, Math.ceil(limits.headersTimeoutMs / 4)),
  };
  const server: Server = tls ? createHttpsServer({ ...settings, ...tls }, handler) : createServer(settings, handler);
  server.keepAliveTimeout = limits.keepAliveTimeoutMs;
  server.setTimeout(limits.idleTimeoutMs);
  server.on('clientError', clientErrorAnswer(limits));
  capConnections(server, role, limits);
  return server;
}

const statusLines: Record<number, string> = { 400: 'Bad Request', 408: 'Request Timeout', 431: 'Request Header Fields Too Large' };

/**
 * Answers what Node's parser refused, as Node and Fastify do, but saying which limit a timed-out
 * request hit. A request whose head arrived has a response object on its socket already.
 */
export function clientErrorAnswer(limits: ConnectionLimits): (error: NodeJS.ErrnoException, socket: Socket) => void {
  return (error, socket) => {
    if (error.code === 'ECONNRESET' || socket.destroyed) return;
    const response = (socket as Socket & { _httpMessage?: ServerResponse })._httpMessage;
    let status = 400;
    let message = 'the request is not valid HTTP';
    if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
      status = 408;
      message = response
        ? `the request did not arrive whole within ${limits.requestTimeoutMs / 1000} s`
        : `the request head did not arrive within ${limits.headersTimeoutMs / 1000} s`;
    } else if (error.code === 'HPE_HEADER_OVERFLOW') {
      status = 431;
      message = 'the request head is larger than this server accepts';
    }
    if (socket.writable && !response?.headersSent) {
      const body = JSON.stringify({ statusCode: status, error: statusLines[status], message });
      socket.write(`HTTP/1.1 ${status} ${statusLines[status]}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
    }
    socket.destroy(error);
  };
}

/**
 * Puts the caps in front of Node's own connection handling: the listener the HTTP server
 * registered for itself is called only for connections within the caps.
 */
function capConnections(server: Server, role: string, limits: ConnectionLimits): void {
  const httpListeners = server.listeners('connection') as ((socket: Socket) => void)[];
  server.removeAllListeners('connection');
  const perAddress = new Map<string, number>();
  let open = 0;
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress ?? 'unknown';
    const fromAddress = perAddress.get(address) ?? 0;
    if (open >= limits.maxConnections) {
      refusedCounter.inc({ role, limit: 'total' });
      refuse(socket, totalCapMessage(role, limits.maxConnections));
      return;
    }
    if (fromAddress >= limits.maxConnectionsPerAddress) {
      refusedCounter.inc({ role, limit: 'address' });
      refuse(socket, addressCapMessage(role, address, limits.maxConnectionsPerAddress));
      return;
    }
    open += 1;
    perAddress.set(address, fromAddress + 1);
    openGauge.inc({ role });
    socket.once('close', () => {
      open -= 1;
      openGauge.dec({ role });
      const left = (perAddress.get(address) ?? 1) - 1;
      if (left === 0) perAddress.delete(address);
      else perAddress.set(address, left);
    });
    for (const listener of httpListeners) listener.call(server, socket);
  });
}

/** What a connection over a cap is told (the gateway's HAProxy plane says the same: haproxy-config.ts). */
export const totalCapMessage = (role: string, max: number): string => `too many connections: the ${role} accepts at most ${max} at once; try again later`;
export const addressCapMessage = (role: string, address: string, max: number): string =>
  `too many connections from ${address}: the ${role} accepts at most ${max} at once from one address; try again later`;
export const refusalBody = (message: string): string => JSON.stringify({ statusCode: 503, error: 'Service Unavailable', message });

/**
 * Answers 503 once the client starts its request (or after a moment, if it sends nothing), then
 * reads and drops what it sends until it closes or the grace ends: closing with unread data would
 * reset the connection before the client read the answer.
 */
function refuse(socket: Socket, message: string): void {
  const body = refusalBody(message);
  const answer = [
    'HTTP/1.1 503 Service Unavailable',
    'content-type: application/json; charset=utf-8',
    `content-length: ${Buffer.byteLength(body)}`,
    `retry-after: ${REFUSED_RETRY_AFTER_SECONDS}`,
    'connection: close',
    '',
    body,
  ].join('\r\n');
  const reply = () => {
    if (!socket.writableEnded && !socket.destroyed) socket.end(answer);
  };
  const replyTimer = setTimeout(reply, 200);
  const graceTimer = setTimeout(() => socket.destroy(), REFUSAL_GRACE_MS);
  socket.on('error', () => socket.destroy());
  socket.once('data', reply);
  socket.once('close', () => {
    clearTimeout(replyTimer);
    clearTimeout(graceTimer);
  });
  socket.resume();
}
