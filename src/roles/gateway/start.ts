import { Type } from '@sinclair/typebox';
import { createRoleServer } from '../../http/server.js';
import { gatewayConnectionLimits } from '../../http/connection-limits.js';
import type { RoleContext, StartedRole, StopReason } from '../role.js';
import { RouteWatch } from './route-watch.js';
import { chooseDataPlane, type DataPlane } from './data-plane.js';
import { NodeDataPlane } from './node-data-plane.js';
import { HaproxyDataPlane } from './haproxy-data-plane.js';
import { gatewayListeners, machineHostNames } from './listener-policy.js';
import { GatewayTls } from './tls/gateway-tls.js';
import { NodeTlsListener } from './tls/node-tls-listener.js';
import { keepTraffic } from './gateway-metrics.js';
import { TrafficHistory } from '../../metrics-history/traffic-history.js';
import { GatewayTraffic } from '../../schemas/service-metrics.js';

// The gateway role: a Host-header load balancer. One route plan, followed from the store
// (route-watch.ts), applied by one data plane: HAProxy when a recent one is installed (or asked
// for), else the built-in Node proxy. Requests for a host that is not a service host reach the
// role's usual Fastify endpoints (/healthz, /readyz, /metrics, /routes, /documentation).
// HTTPS (tls/): certificates, public host names and ACME are the same under either data plane;
// the Node plane opens its own TLS listener (the only place secure contexts are built), while
// HAProxy terminates TLS itself on --https-port and passes ACME challenges and HTTPS redirects to
// the Node server.

/** On shutdown, in-flight HTTPS requests get this long to finish before connections are cut. */
const SHUTDOWN_GRACE_MS = 5_000;

export async function startGateway({ config, store, log, access }: RoleContext): Promise<StartedRole> {
  const settings = config.gateway;
  const domains = { domain: config.domain, internalDomain: settings.internalDomain };
  const kind = await chooseDataPlane(settings.dataPlane, settings.haproxyBin ?? 'haproxy');
  const watch = await RouteWatch.start(store, {
    domains,
    exposeComponents: settings.exposeComponents,
    log,
    leaseTtlSeconds: config.announceTtlSeconds,
    machineHosts: machineHostNames(config.advertiseHost),
  });
  let tls: GatewayTls | undefined;
  const traffic = new TrafficHistory(config.metricsIntervalSeconds);
  keepTraffic(traffic);
  const own = await createRoleServer({
    role: 'gateway',
    access,
    logger: log,
    readiness: async () => {
      await store.ping();
      return { store: store.description, ...plane.readiness(), ...tls?.readiness() };
    },
  });
  own.get(
    '/routes',
    {
      schema: {
        description: 'The data plane that forwards requests, and the route table it holds: host names, and the units taking new requests for them.',
        response: { 200: Type.Object({ dataPlane: Type.String(), routes: Type.Array(Type.Any()) }) },
      },
    },
    async () => ({ dataPlane: plane.kind, routes: await plane.view() }),
  );
  own.get(
    '/traffic',
    {
      schema: {
        description: "The last hour of this gateway's requests per service, in intervals of --metrics-interval: counts, 5xx answers and latency buckets (the orchestrator merges every gateway's for the dashboard's graphs).",
        response: { 200: GatewayTraffic },
      },
    },
    async () => {
      await plane.countFinishedIntervals?.();
      return { dataPlane: plane.kind, intervalSeconds: traffic.intervalSeconds, services: traffic.finished() };
    },
  );
  await own.ready();

  const node = new NodeDataPlane(config, domains, log, (req, res) => own.routing(req, res), (req, res) => tls?.handlePlain(req, res) ?? false);
  const httpsPort = settings.tls.httpsPort;
  if (httpsPort !== undefined) tls = await GatewayTls.start({ store, log, settings: settings.tls, domains, exposeComponents: settings.exposeComponents });
  // Secure contexts only where Node terminates TLS: under HAProxy they would be built on every
  // certificate change and never used.
  const nodeTls =
    tls && kind === 'node' && httpsPort !== undefined
      ? new NodeTlsListener({
          ...tls.served,
          log,
          port: httpsPort,
          hstsMaxAgeSeconds: settings.tls.hstsMaxAgeSeconds,
          limits: gatewayConnectionLimits(config.http, settings.idleTimeoutSeconds * 1000),
          maxHeaderSize: settings.maxHeaderSize,
          handler: node.handlePublic,
          upgrade: node.upgradePublic,
        })
      : undefined;
  const haproxyTls = tls && httpsPort !== undefined ? { port: httpsPort, ...tls.served, hstsMaxAgeSeconds: settings.tls.hstsMaxAgeSeconds, opened: (port: number) => tls?.servedOn(port) } : undefined;
  const plane: DataPlane = kind === 'haproxy' ? new HaproxyDataPlane(node, config, log, haproxyTls) : node;
  watch.follow((plan) => plane.apply(plan));
  log.info({ dataPlane: kind }, `gateway data plane: ${kind}`);

  return {
    listen: async (host, port) => {
      const listeners = gatewayListeners(host, port, settings, config.advertiseHost);
      // The ports asked for before they open, those opened (port 0: the system's choice) after: no unit address there is routed.
      watch.listeningOn([port, listeners.internal?.port ?? 0, httpsPort ?? 0]);
      await plane.listen(listeners);
      const opened = plane.listeningPorts();
      if (nodeTls) {
        const tlsPort = await nodeTls.listen(host);
        tls?.servedOn(tlsPort);
        opened.push(tlsPort);
      }
      watch.listeningOn(opened);
    },
    close: async (reason?: StopReason) => {
      await watch.close();
      await Promise.all([plane.close(reason), nodeTls?.close(SHUTDOWN_GRACE_MS)]);
      await tls?.close();
      await own.close();
      keepTraffic(undefined);
    },
  };
}
