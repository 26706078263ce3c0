import { createRoleServer } from '../../http/server.js';
import { apiConnectionLimits } from '../../http/connection-limits.js';
import { quotaPrefix, servicePrefix } from '../../store/keys.js';
import { PrefixCache } from '../../store/prefix-cache.js';
import { fastifyRole, storeReadiness, type RoleContext, type StartedRole } from '../role.js';
import { directoryRoutes } from './routes.js';

export async function startDirectory({ config, store, log, access, storeSpace, writeBudget }: RoleContext): Promise<StartedRole> {
  const server = await createRoleServer({ role: 'directory', logger: log, access, limits: apiConnectionLimits(config.http), readiness: storeReadiness(store, storeSpace), journal: store });
  storeSpace.watch();
  const services = await PrefixCache.start(store, servicePrefix);
  const quotas = await PrefixCache.start(store, quotaPrefix);
  directoryRoutes(server, store, services, { space: storeSpace, budget: writeBudget }, { quotas, defaultUnitMemoryMB: config.defaultUnitMemoryMB });
  return fastifyRole(server, async () => {
    await Promise.all([services.close(), quotas.close()]);
  });
}
