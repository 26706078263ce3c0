import { createRoleServer } from '../../http/server.js';
import { apiConnectionLimits } from '../../http/connection-limits.js';
import { PeerClient } from '../../http/peer-client.js';
import { fastifyRole, type RoleContext, type StartedRole } from '../role.js';
import { orchestratorRoutes } from './routes.js';
import { tokenRoutes, warnWhileNoToken } from './token-routes.js';
import { notificationRoutes } from './notification-routes.js';
import { RegistryAllowList } from '../../http/registry-policy.js';
import { registryRoutes } from './registry-routes.js';
import { certificateRoutes } from './certificate-routes.js';
import { quotaRoutes } from './quota-routes.js';
import { serviceMetricsRoute } from './service-metrics-route.js';
import { EventHub, eventsRoute } from './events.js';
import { dashboardRoutes } from '../web/dashboard-assets.js';
import { sessionRoutes } from '../web/session-routes.js';

export async function startOrchestrator({ config, store, log, access }: RoleContext): Promise<StartedRole> {
  const peers = {
    directory: new PeerClient(store, 'service-directory', config.peers.directoryUrl),
    scheduler: new PeerClient(store, 'scheduler', config.peers.schedulerUrl),
  };
  const server = await createRoleServer({
    journal: store,
    role: 'orchestrator',
    access,
    limits: apiConnectionLimits(config.http),
    logger: log,
    readiness: async () => {
      await store.ping();
      await Promise.all([peers.directory.call('GET', '/healthz'), peers.scheduler.call('GET', '/healthz')]);
      return { store: store.description, peers: { 'service-directory': 'ok', scheduler: 'ok' } };
    },
  });
  orchestratorRoutes(server, store, peers);
  serviceMetricsRoute(server, store, peers.directory, config.metricsIntervalSeconds);
  tokenRoutes(server, store);
  await warnWhileNoToken(store, access.mode, log);
  notificationRoutes(server, store, new RegistryAllowList(config.allowedNotificationDestinations, '--allowed-notification-destination'));
  registryRoutes(server, store);
  quotaRoutes(server, store);
  // Every role in this one process (`platform up`): the single-machine mode.
  const singleMachine = (['directory', 'scheduler', 'agent', 'gateway'] as const).every((role) => config.roles.includes(role));
  certificateRoutes(server, store, { domain: config.domain, internalDomain: config.gateway.internalDomain }, { singleMachine });
  sessionRoutes(server, access);
  const events = new EventHub(store, log);
  eventsRoute(server, events);
  // Serving the page warms the event watches, so the page's stream finds them open.
  dashboardRoutes(server, { pageServed: () => events.warm() });
  return fastifyRole(server, () => events.close());
}
