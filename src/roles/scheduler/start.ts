import { createRoleServer } from '../../http/server.js';
import { fastifyRole, storeReadiness, type RoleContext, type StartedRole } from '../role.js';
import { Scheduler } from './scheduler.js';
import { schedulerRoutes } from './routes.js';

export async function startScheduler({ config, store, log }: RoleContext): Promise<StartedRole> {
  const server = await createRoleServer({ role: 'scheduler', logger: log, readiness: storeReadiness(store) });
  const scheduler = new Scheduler({
    store,
    log,
    registry: { insecureRegistries: config.scheduler.insecureRegistries },
  });
  schedulerRoutes(server, scheduler);
  await scheduler.start();
  return fastifyRole(server, () => scheduler.close());
}
