import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { createLimitedServer, gatewayConnectionLimits } from '../../http/connection-limits.js';
import type { PlatformConfig } from '../../config.js';
import type { FastifyBaseLogger } from 'fastify';
import type { DataPlane } from './data-plane.js';
import type { Domains } from '../../http/host-name.js';
import type { PlannedRoute } from './route-plan.js';
import { RouteTable, type RouteView } from './route-table.js';
import type { ServiceMetrics } from './gateway-metrics.js';
import { GatewayProxy } from './proxy.js';
import { WebSocketTunnels } from './websocket-tunnel.js';
import { headerValue } from './request-head.js';
import { LISTENER_HEADER, openPolicy, type GatewayListeners, type ListenerPolicy } from './listener-policy.js';

// The built-in data plane: Node's http server with undici pools (Fastify's routing and validation
// would cost more than the proxying itself). Requests for a host that is not a service host reach
// the role's own Fastify endpoints through `own`.

/** On shutdown, in-flight requests get this long to finish before connections are cut. */
const SHUTDOWN_GRACE_MS = 5_000;

export type OwnRouting = (req: IncomingMessage, res: ServerResponse) => void;
/** What a plain listener answers before routing (ACME challenges, HTTPS redirects); true when it answered. */
export type PlainFirst = (req: IncomingMessage, res: ServerResponse) => boolean;

/** A listener of the Node plane: its policy, or `behind-haproxy` (the listener HAProxy names in LISTENER_HEADER). */
export interface NodeListener {
  host: string;
  port: number;
  policy: ListenerPolicy | 'behind-haproxy';
}

export class NodeDataPlane implements DataPlane {
  readonly kind = 'node' as const;
  private readonly table: RouteTable;
  private readonly proxy: GatewayProxy;
  private readonly tunnels: WebSocketTunnels;
  private readonly servers: Server[] = [];
  /** The public listener's policy, which the HAProxy plane's requests from its public listener follow. */
  private publicPolicy: ListenerPolicy = openPolicy;

  constructor(
    private readonly config: PlatformConfig,
    domains: Domains,
    log: FastifyBaseLogger,
    private readonly own: OwnRouting,
    private readonly plainFirst: PlainFirst = () => false,
  ) {
    const settings = config.gateway;
    this.table = new RouteTable({ upstream: { connections: settings.upstreamConnections, connectTimeoutMs: 5_000 }, log });
    this.proxy = new GatewayProxy(this.table, {
      domains,
      requestTimeoutMs: settings.requestTimeoutSeconds * 1000,
      idleTimeoutMs: settings.idleTimeoutSeconds * 1000,
    });
    this.tunnels = new WebSocketTunnels(this.table, domains);
  }

  apply(plan: readonly PlannedRoute[]): void {
    this.table.apply(plan);
  }

  async listen(listeners: GatewayListeners): Promise<void> {
    const internal = listeners.internal ? [{ ...listeners.internal, policy: openPolicy }] : [];
    // The HTTPS listener (handlePublic) follows the public policy too: it is a public listener.
    await this.listenOn([listeners.public, ...internal], listeners.public.policy);
  }

  /**
   * Listens where told; the HAProxy plane puts its `behind-haproxy` listener here. `publicPolicy` is the public listener's, which
   * the HTTPS listener and requests HAProxy marks as public follow: no default, so no caller can reset it to the open policy (H1).
   */
  async listenOn(listeners: NodeListener[], publicPolicy: ListenerPolicy): Promise<void> {
    this.publicPolicy = publicPolicy;
    for (const listener of listeners) {
      const server = this.server(listener.policy);
      this.servers.push(server);
      await new Promise<void>((resolve, reject) => {
        const failed = (error: Error) => {
          // Not listening: the caller may try another port.
          this.servers.splice(this.servers.indexOf(server), 1);
          reject(error);
        };
        server.once('error', failed);
        server.listen(listener.port, listener.host, () => {
          server.off('error', failed);
          resolve();
        });
      });
    }
  }

  /** A request the HTTPS listener took (public, like the plain public listener's). */
  readonly handlePublic = (req: IncomingMessage, res: ServerResponse): void => {
    if (!this.proxy.refused(req, res) && !this.proxy.handle(req, res, this.publicPolicy)) this.own(req, res);
  };

  readonly upgradePublic = (req: IncomingMessage, socket: Duplex, head: Buffer): void => this.tunnels.handle(req, socket, head, this.publicPolicy);

  /** The port its first listener listens on (with port 0, the one the system chose). */
  port(): number {
    const address = this.servers[0]?.address();
    return typeof address === 'object' && address !== null ? address.port : 0;
  }

  listeningPorts(): number[] {
    return this.servers.map((server) => server.address()).flatMap((address) => (typeof address === 'object' && address !== null ? [address.port] : []));
  }

  readiness(): Record<string, unknown> {
    return { dataPlane: this.kind, routes: this.table.view().length };
  }

  view(): RouteView[] {
    return this.table.view();
  }

  /** The request counts of a route (HAProxy's log lines are counted into the same ones). */
  metricsOf(name: string): ServiceMetrics | undefined {
    return this.table.metricsOf(name);
  }

  async close(): Promise<void> {
    const closed = this.servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve())));
    for (const server of this.servers) server.closeIdleConnections();
    this.tunnels.closeAll();
    await this.table.close(SHUTDOWN_GRACE_MS);
    for (const server of this.servers) server.closeAllConnections();
    await Promise.all(closed);
  }

  private server(policy: ListenerPolicy | 'behind-haproxy'): Server {
    const settings = this.config.gateway;
    const policyOf = (req: IncomingMessage): ListenerPolicy =>
      policy !== 'behind-haproxy' ? policy : headerValue(req.rawHeaders, LISTENER_HEADER) === 'public' ? this.publicPolicy : openPolicy;
    const clientLimits = gatewayConnectionLimits(this.config.http, settings.idleTimeoutSeconds * 1000);
    // Behind HAProxy every connection comes from 127.0.0.1: the per-address cap is HAProxy's, on
    // the clients' own addresses; here it would refuse HAProxy itself once that many requests for
    // the gateway's own answers (404s, /metrics, …) were under way at once.
    const limits = policy === 'behind-haproxy' ? { ...clientLimits, maxConnectionsPerAddress: clientLimits.maxConnections } : clientLimits;
    const server = createLimitedServer('gateway', limits, (req, res) => {
      if (this.proxy.refused(req, res) || this.plainFirst(req, res)) return;
      if (!this.proxy.handle(req, res, policyOf(req))) this.own(req, res);
    }, { maxHeaderSize: settings.maxHeaderSize });
    server.on('upgrade', (req, socket, head) => this.tunnels.handle(req, socket, head, policyOf(req)));
    return server;
  }
}
