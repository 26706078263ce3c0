import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { Type } from '@sinclair/typebox';
import { createRoleServer } from '../../http/server.js';
import { createLimitedServer, gatewayConnectionLimits } from '../../http/connection-limits.js';
import type { RoleContext, StartedRole } from '../role.js';
import { RouteTable } from './route-table.js';
import { GatewayProxy } from './proxy.js';
import { WebSocketTunnels } from './websocket-tunnel.js';
import { GatewayTls } from './tls/gateway-tls.js';

// The gateway role: a Host-header load balancer. The proxy path is Node's http server with undici
// pools (Fastify's routing and validation would cost more than the proxying itself); requests for
// a host that is not a service host reach the role's usual Fastify endpoints (/healthz, /readyz,
// /metrics, /routes, /documentation).

/** On shutdown, in-flight requests get this long to finish before connections are cut. */
const SHUTDOWN_GRACE_MS = 5_000;

export async function startGateway({ config, store, log, access }: RoleContext): Promise<StartedRole> {
  const settings = config.gateway;
  const domains = { domain: config.domain, internalDomain: settings.internalDomain };
  const table = await RouteTable.start(store, {
    domains,
    exposeComponents: settings.exposeComponents,
    upstream: { connections: settings.upstreamConnections, connectTimeoutMs: 5_000 },
    log,
  });
  let tls: GatewayTls | undefined;
  const own = await createRoleServer({
    role: 'gateway',
    access,
    logger: log,
    readiness: async () => {
      await store.ping();
      return { store: store.description, routes: table.view().length, ...tls?.readiness() };
    },
  });
  own.get(
    '/routes',
    { schema: { description: 'The route table: host names, and the units taking new requests for them.', response: { 200: Type.Array(Type.Any()) } } },
    async () => table.view(),
  );
  await own.ready();

  const proxy = new GatewayProxy(table, {
    domains,
    requestTimeoutMs: settings.requestTimeoutSeconds * 1000,
    idleTimeoutMs: settings.idleTimeoutSeconds * 1000,
  });
  const tunnels = new WebSocketTunnels(table);
  const limits = gatewayConnectionLimits(config.http, settings.idleTimeoutSeconds * 1000);
  const handler = (req: IncomingMessage, res: ServerResponse) => {
    if (!proxy.handle(req, res)) own.routing(req, res);
  };
  const upgrade = (req: IncomingMessage, socket: Duplex, head: Buffer) => tunnels.handle(req, socket, head);
  if (settings.tls.httpsPort !== undefined) {
    tls = await GatewayTls.start({ store, log, settings: settings.tls, domains, exposeComponents: settings.exposeComponents, limits, maxHeaderSize: settings.maxHeaderSize, handler, upgrade });
  }
  const withTls = tls;
  const plainHandler = withTls
    ? (req: IncomingMessage, res: ServerResponse) => {
        if (!withTls.handlePlain(req, res)) handler(req, res);
      }
    : handler;
  const server: Server = createLimitedServer('gateway', limits, plainHandler, { maxHeaderSize: settings.maxHeaderSize });
  server.on('upgrade', upgrade);

  return {
    listen: (host, port) =>
      new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, host, () => {
          server.off('error', reject);
          resolve();
        });
      }).then(() => tls?.listen(host)),
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      tunnels.closeAll();
      await Promise.all([table.close(SHUTDOWN_GRACE_MS), tls?.close(SHUTDOWN_GRACE_MS)]);
      server.closeAllConnections();
      await closed;
      await own.close();
    },
  };
}
