import { connect, type Socket } from 'node:net';
import { request as httpRequest, STATUS_CODES, type IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { hostName } from '../../http/host-name.js';
import { chooseUpstream } from './upstream-choice.js';
import { clientAddress, clientResponseHeaders, schemeOf, upstreamRequestHeaders } from './forwarded-headers.js';
import { headerValue, isOriginForm, NOT_ORIGIN_FORM } from './request-head.js';
import { sendSocketError } from './gateway-error.js';
import { unroutedMetrics } from './gateway-metrics.js';
import { RETRY_AFTER_SECONDS } from './proxy.js';
import type { Route, RouteTable } from './route-table.js';
import { routesHost, type ListenerPolicy } from './listener-policy.js';
import type { Domains } from '../../http/host-name.js';
import type { Upstream } from './upstream.js';

// Upgrade requests (WebSocket): the request head is rewritten as for any request (hop-by-hop
// headers dropped, X-Forwarded-* added, `Connection: upgrade` kept) and sent on a fresh TCP
// connection to a unit; once the unit answers 101, bytes are piped both ways until either side closes.
// A tunnel counts as a request in flight on its unit, so least-outstanding balancing sees it.

const AVOID_MS = 2_000;
const KEEPALIVE_MS = 30_000;

export class WebSocketTunnels {
  private readonly open = new Set<Socket | Duplex>();

  constructor(
    private readonly table: RouteTable,
    private readonly domains: Domains,
  ) {}

  handle(req: IncomingMessage, client: Duplex, head: Buffer, policy: ListenerPolicy): void {
    if (!isOriginForm(req.url ?? '')) {
      unroutedMetrics.answered(NOT_ORIGIN_FORM.status);
      return sendSocketError(client, NOT_ORIGIN_FORM);
    }
    const rawHost = headerValue(req.rawHeaders, 'host');
    const host = hostName(rawHost);
    const route = routesHost(policy, host, this.domains) ? this.table.lookup(host) : undefined;
    if (route === undefined) {
      unroutedMetrics.answered(404);
      return sendSocketError(client, { status: 404, message: `no service is reachable at ${host === '' ? 'a request without a Host header' : host}` });
    }
    const index = chooseUpstream(route.upstreams, route.cursor, Date.now());
    if (index === -1) {
      route.metrics.answered(503);
      return sendSocketError(client, { status: 503, message: `${route.kind} ${route.name} has no healthy unit`, retryAfter: RETRY_AFTER_SECONDS });
    }
    route.cursor = index + 1;
    const headers = upstreamRequestHeaders(req.rawHeaders, {
      clientAddress: clientAddress(req.socket.remoteAddress),
      host: rawHost ?? host,
      proto: schemeOf(req),
      upgrade: headerValue(req.rawHeaders, 'upgrade') ?? 'websocket',
    });
    // Idle WebSockets are normal: the gateway's idle timeout does not apply, TCP keep-alive does.
    if ('setTimeout' in client) (client as Socket).setTimeout(0);
    if ('setKeepAlive' in client) (client as Socket).setKeepAlive(true, KEEPALIVE_MS);
    this.open.add(client);
    client.once('close', () => this.open.delete(client));
    client.on('error', () => client.destroy());
    this.tunnel(route, route.upstreams[index]!, client, { method: req.method ?? 'GET', path: req.url ?? '/', headers, head }, true);
  }

  /** Closes every tunnel (on shutdown). */
  closeAll(): void {
    for (const socket of this.open) socket.destroy();
  }

  private tunnel(route: Route, upstream: Upstream, client: Duplex, request: UpgradeRequest, mayRetry: boolean): void {
    upstream.inFlight += 1;
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      upstream.inFlight -= 1;
    };
    const unit = connect({ host: upstream.host, port: upstream.port, noDelay: true });
    this.open.add(unit);
    let connected = false;
    unit.once('connect', () => {
      connected = true;
      if (client.destroyed) return unit.destroy();
      unit.setKeepAlive(true, KEEPALIVE_MS);
      this.exchange(route, upstream, unit, client, request);
    });
    unit.on('error', (error) => {
      if (connected) return;
      route.metrics.upstreamError('connect');
      upstream.avoidUntil = Date.now() + AVOID_MS;
      release();
      if (client.destroyed) return;
      const next = mayRetry ? chooseUpstream(route.upstreams, route.cursor, Date.now(), upstream) : -1;
      if (next !== -1 && route.upstreams[next] !== upstream) {
        route.cursor = next + 1;
        route.metrics.retried();
        return this.tunnel(route, route.upstreams[next]!, client, request, false);
      }
      route.metrics.answered(502);
      sendSocketError(client, { status: 502, message: `${upstream.unit} of ${route.name} could not be reached: ${error.message}` });
    });
    unit.once('close', () => {
      this.open.delete(unit);
      release();
    });
    client.once('close', () => unit.destroy());
  }

  /**
   * The upgrade request on the unit's connection, read back by Node's HTTP parser. Only a 101
   * opens the tunnel; any other answer goes to the client with `Connection: close` and ends both
   * connections, so the client's next bytes are never passed on unparsed: they would reach the unit
   * without the gateway's hop (its own Host, X-Forwarded-For, and from the gateway's address, a
   * local caller of a component on the same machine) (H2).
   */
  private exchange(route: Route, upstream: Upstream, unit: Socket, client: Duplex, request: UpgradeRequest): void {
    let answered = false;
    const upstreamRequest = httpRequest({ createConnection: () => unit, method: request.method, path: request.path, headers: request.headers, setHost: false });
    upstreamRequest.on('upgrade', (response: IncomingMessage, socket: Duplex, unitHead: Buffer) => {
      answered = true;
      route.metrics.answered('upgrade');
      const headers = [...clientResponseHeaders(response.rawHeaders), 'connection', 'upgrade', 'upgrade', response.headers.upgrade ?? 'websocket'];
      client.write(responseHead(101, response.statusMessage, headers));
      if (unitHead.length > 0) client.write(unitHead);
      if (request.head.length > 0) socket.write(request.head);
      socket.once('close', () => client.destroy());
      socket.pipe(client);
      client.pipe(socket);
    });
    upstreamRequest.on('response', (response: IncomingMessage) => {
      answered = true;
      route.metrics.answered(response.statusCode ?? 502);
      client.write(responseHead(response.statusCode ?? 502, response.statusMessage, [...clientResponseHeaders(response.rawHeaders), 'connection', 'close']));
      response.once('end', () => unit.destroy());
      response.once('error', () => client.destroy());
      response.pipe(client);
    });
    upstreamRequest.on('error', (error) => {
      if (answered || client.destroyed) return void client.destroy();
      route.metrics.upstreamError('reset');
      route.metrics.answered(502);
      sendSocketError(client, { status: 502, message: `${upstream.unit} of ${route.name} closed the connection before answering: ${error.message}` });
    });
    upstreamRequest.end();
  }
}

/** An upgrade request as it goes to a unit: the gateway's headers, and what the client sent after its head (held until the 101). */
interface UpgradeRequest {
  method: string;
  path: string;
  headers: string[];
  head: Buffer;
}

function responseHead(status: number, statusMessage: string | undefined, headers: readonly string[]): string {
  let head = `HTTP/1.1 ${status} ${statusMessage || STATUS_CODES[status] || ''}\r\n`;
  for (let i = 0; i < headers.length; i += 2) head += `${headers[i]}: ${headers[i + 1]}\r\n`;
  return `${head}\r\n`;
}
