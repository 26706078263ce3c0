import { connect, type Socket } from 'node:net';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { hostName } from './host-name.js';
import { chooseUpstream } from './upstream-choice.js';
import { clientAddress, schemeOf, upstreamRequestHeaders } from './forwarded-headers.js';
import { headerValue } from './request-head.js';
import { sendSocketError } from './gateway-error.js';
import { unroutedMetrics } from './gateway-metrics.js';
import { RETRY_AFTER_SECONDS } from './proxy.js';
import type { Route, RouteTable } from './route-table.js';
import { routesHost, type ListenerPolicy } from './listener-policy.js';
import type { Domains } from './host-name.js';
import type { Upstream } from './upstream.js';

// Upgrade requests (WebSocket): the request head is rewritten as for any request (hop-by-hop
// headers dropped, X-Forwarded-* added, `Connection: upgrade` kept), sent on a fresh TCP
// connection to a unit, and from then on bytes are piped both ways until either side closes.
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
    let requestHead = `${req.method} ${req.url} HTTP/1.1\r\n`;
    for (let i = 0; i < headers.length; i += 2) requestHead += `${headers[i]}: ${headers[i + 1]}\r\n`;
    requestHead += '\r\n';
    // Idle WebSockets are normal: the gateway's idle timeout does not apply, TCP keep-alive does.
    if ('setTimeout' in client) (client as Socket).setTimeout(0);
    if ('setKeepAlive' in client) (client as Socket).setKeepAlive(true, KEEPALIVE_MS);
    this.open.add(client);
    client.once('close', () => this.open.delete(client));
    client.on('error', () => client.destroy());
    this.tunnel(route, route.upstreams[index]!, client, Buffer.concat([Buffer.from(requestHead, 'latin1'), head]), true);
  }

  /** Closes every tunnel (on shutdown). */
  closeAll(): void {
    for (const socket of this.open) socket.destroy();
  }

  private tunnel(route: Route, upstream: Upstream, client: Duplex, firstBytes: Buffer, mayRetry: boolean): void {
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
      route.metrics.answered('upgrade');
      unit.write(firstBytes);
      unit.pipe(client);
      client.pipe(unit);
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
        return this.tunnel(route, route.upstreams[next]!, client, firstBytes, false);
      }
      route.metrics.answered(502);
      sendSocketError(client, { status: 502, message: `${upstream.unit} of ${route.name} could not be reached: ${error.message}` });
    });
    unit.once('close', () => {
      this.open.delete(unit);
      release();
      if (connected) client.destroy();
    });
    client.once('close', () => unit.destroy());
  }
}
