import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { createLimitedServer, gatewayConnectionLimits } from '../../http/connection-limits.js';
import type { PlatformConfig } from '../../config.js';
import type { FastifyBaseLogger } from 'fastify';
import type { DataPlane } from './data-plane.js';
import type { Domains } from './host-name.js';
import type { PlannedRoute } from './route-plan.js';
import { RouteTable, type RouteView } from './route-table.js';
import { GatewayProxy } from './proxy.js';
import { WebSocketTunnels } from './websocket-tunnel.js';

// The built-in data plane: Node's http server with undici pools (Fastify's routing and validation
// would cost more than the proxying itself). Requests for a host that is not a service host reach
// the role's own Fastify endpoints through `own`.

/** On shutdown, in-flight requests get this long to finish before connections are cut. */
const SHUTDOWN_GRACE_MS = 5_000;

export type OwnRouting = (req: IncomingMessage, res: ServerResponse) => void;

export class NodeDataPlane implements DataPlane {
  readonly kind = 'node' as const;
  private readonly table: RouteTable;
  private readonly tunnels: WebSocketTunnels;
  private readonly server: Server;

  constructor(config: PlatformConfig, domains: Domains, log: FastifyBaseLogger, own: OwnRouting) {
    const settings = config.gateway;
    this.table = new RouteTable({ upstream: { connections: settings.upstreamConnections, connectTimeoutMs: 5_000 }, log });
    const proxy = new GatewayProxy(this.table, {
      domains,
      requestTimeoutMs: settings.requestTimeoutSeconds * 1000,
      idleTimeoutMs: settings.idleTimeoutSeconds * 1000,
    });
    this.tunnels = new WebSocketTunnels(this.table);
    const limits = gatewayConnectionLimits(config.http, settings.idleTimeoutSeconds * 1000);
    this.server = createLimitedServer('gateway', limits, (req, res) => {
      if (!proxy.handle(req, res)) own(req, res);
    }, { maxHeaderSize: settings.maxHeaderSize });
    this.server.on('upgrade', (req, socket, head) => this.tunnels.handle(req, socket, head));
  }

  apply(plan: readonly PlannedRoute[]): void {
    this.table.apply(plan);
  }

  listen(host: string, port: number): Promise<void> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
  }

  /** The port it listens on (after `listen`; with port 0, the one the system chose). */
  port(): number {
    const address = this.server.address();
    return typeof address === 'object' && address !== null ? address.port : 0;
  }

  readiness(): Record<string, unknown> {
    return { dataPlane: this.kind, routes: this.table.view().length };
  }

  view(): RouteView[] {
    return this.table.view();
  }

  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.server.closeIdleConnections();
    this.tunnels.closeAll();
    await this.table.close(SHUTDOWN_GRACE_MS);
    this.server.closeAllConnections();
    await closed;
  }
}
