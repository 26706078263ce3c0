import { request as undiciRequest } from 'undici';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { RoleServer } from '../../http/server.js';
import type { PeerClient } from '../../http/peer-client.js';
import { badRequest, notFound, unavailable } from '../../http/errors.js';
import { callerKey, isLocalCall, passedOnAuthorization } from '../../auth/caller.js';
import { relayedCallerHeaders } from '../../auth/relayed-caller.js';
import { keepOpen } from '../../http/stream-limit.js';

// The standalone dashboard talks to the API on its own origin: these paths are passed through
// to the orchestrator found in the store, byte for byte and streamed (GET /events and log tails
// stay open), so the page works the same behind the web role as behind the orchestrator.

export const proxiedPaths = ['/services', '/services/*', '/cluster/*', '/deployments', '/deployments/*', '/journal', '/events'];

const isProxied = (path: string): boolean =>
  proxiedPaths.some((pattern) => (pattern.endsWith('/*') ? path.startsWith(pattern.slice(0, -1)) : path === pattern));

/**
 * A request target with its dot segments resolved, percent-encoded dots included, the way the
 * orchestrator's URL parser (WHATWG, in undici) would resolve them: matched against the
 * allow-list before that, `/services/../metrics` would pass as a /services path and reach
 * /metrics. What cannot be resolved to one plain path is refused.
 */
export function resolvedTarget(target: string): { path: string; query: string } | { refused: string } {
  const mark = target.indexOf('?');
  const raw = mark === -1 ? target : target.slice(0, mark);
  if (/%2f|%5c|%00|\\/i.test(raw)) return { refused: 'the path holds an encoded slash, a backslash or NUL' };
  try {
    decodeURIComponent(raw);
  } catch {
    return { refused: 'the path is not valid percent-encoding' };
  }
  const segments: string[] = [];
  for (const segment of raw.replace(/%2e/gi, '.').split('/').slice(1)) {
    if (segment === '.') continue;
    if (segment !== '..') segments.push(segment);
    else if (segments.pop() === undefined) return { refused: 'the path climbs above /' };
  }
  return { path: `/${segments.join('/')}`, query: mark === -1 ? '' : target.slice(mark) };
}

const forwardedRequestHeaders = ['content-type', 'accept', 'last-event-id', 'if-none-match'];
const forwardedResponseHeaders = ['content-type', 'cache-control', 'etag', 'location', 'x-accel-buffering', 'retry-after'];

/** DELETE /services/:name waits until the units stopped; the orchestrator allows it 90 s. */
const HEADERS_TIMEOUT_MS = 120_000;

/**
 * The orchestrator checks the caller's token or session (passed on; the session cookie, which the
 * CSRF rule has let through here, as `Authorization: Session`); a call that is not local here is
 * marked forwarded and names its caller, signed, so the orchestrator neither takes it for a local
 * one nor counts its failures against this role.
 */
export function orchestratorProxy(orchestrator: PeerClient, listenerLoopback: boolean, bodyLimit = 1024 * 1024) {
  return async (scope: RoleServer): Promise<void> => {
    // Bodies are passed on unparsed; the orchestrator validates them.
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit }, (_request, body, done) => done(null, body));
    for (const url of proxiedPaths) {
      scope.route({
        method: ['GET', 'POST', 'PATCH', 'DELETE'],
        url,
        schema: { hide: true },
        config: { access: 'open' },
        handler: (request, reply) => forward(orchestrator, request, reply, listenerLoopback),
      });
    }
  };
}

/** An event stream or a followed log tail: open for as long as the browser wants. */
function isStream(request: FastifyRequest): boolean {
  const [path, query = ''] = request.url.split('?');
  return path === '/events' || (path!.endsWith('/logs') && new URLSearchParams(query).get('follow') === 'true');
}

async function forward(orchestrator: PeerClient, request: FastifyRequest, reply: FastifyReply, listenerLoopback: boolean): Promise<FastifyReply> {
  const target = resolvedTarget(request.url);
  if ('refused' in target) throw badRequest(`${request.url.split('?')[0]} is not passed on to the orchestrator: ${target.refused}`);
  if (!isProxied(target.path)) throw notFound(`no route ${request.method} ${target.path}: the dashboard passes on only ${proxiedPaths.join(', ')}`);
  const base = await orchestrator.baseUrl();
  const headers: Record<string, string> = {};
  for (const name of forwardedRequestHeaders) {
    const value = request.headers[name];
    if (typeof value === 'string') headers[name] = value;
  }
  const authorization = passedOnAuthorization(request.headers);
  if (authorization !== undefined) headers.authorization = authorization;
  if (!(await isLocalCall(request, listenerLoopback))) {
    const before = request.headers['x-forwarded-for'];
    headers['x-forwarded-for'] = [before, request.socket.remoteAddress ?? 'unknown'].filter(Boolean).join(', ');
    const relayKey = request.server.accessControl?.relayKey;
    if (relayKey) Object.assign(headers, relayedCallerHeaders(relayKey, await callerKey(request)));
  }
  let upstream;
  try {
    upstream = await undiciRequest(`${base}${target.path}${target.query}`, {
      method: request.method as 'GET' | 'POST' | 'PATCH' | 'DELETE',
      headers,
      body: Buffer.isBuffer(request.body) ? request.body : undefined,
      headersTimeout: HEADERS_TIMEOUT_MS,
      bodyTimeout: 0,
    });
  } catch (error) {
    throw unavailable(`orchestrator at ${base} is not answering: ${(error as Error).message}`);
  }
  void reply.status(upstream.statusCode);
  for (const name of forwardedResponseHeaders) {
    const value = upstream.headers[name];
    if (typeof value === 'string') void reply.header(name, value);
  }
  if (upstream.statusCode === 204 || upstream.statusCode === 304) {
    await upstream.body.dump();
    return reply.send();
  }
  // The browser left (a closed event stream or log tail): stop reading from the orchestrator.
  reply.raw.once('close', () => upstream.body.destroy());
  // The orchestrator counts and caps streams; a quiet one must outlive this server's idle timeout.
  if (isStream(request)) keepOpen(reply.raw);
  return reply.send(upstream.body);
}
