import { createRoleServer } from '../../http/server.js';
import { apiConnectionLimits } from '../../http/connection-limits.js';
import { PeerClient } from '../../http/peer-client.js';
import { fastifyRole, type RoleContext, type StartedRole } from '../role.js';
import { dashboardRoutes } from './dashboard-assets.js';
import { orchestratorProxy } from './orchestrator-proxy.js';
import { sessionRoutes } from './session-routes.js';

/**
 * The standalone dashboard (`platform serve --role web`, announced at /platform/services/web):
 * the same page the orchestrator serves at `/`, with the API paths it calls passed through to the
 * orchestrator announced in the store (or --orchestrator-url).
 */
export async function startWeb({ config, store, log, access }: RoleContext): Promise<StartedRole> {
  const orchestrator = new PeerClient(store, 'orchestrator', config.peers.orchestratorUrl);
  const server = await createRoleServer({
    role: 'web',
    access,
    limits: apiConnectionLimits(config.http),
    logger: log,
    readiness: async () => {
      await store.ping();
      await orchestrator.call('GET', '/healthz');
      return { store: store.description, peers: { orchestrator: 'ok' } };
    },
  });
  dashboardRoutes(server);
  sessionRoutes(server, access);
  await server.register(orchestratorProxy(orchestrator, access.listenerLoopback));
  return fastifyRole(server);
}
