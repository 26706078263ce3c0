import { createRoleServer } from '../../http/server.js';
import { fastifyRole, type RoleContext, type StartedRole } from '../role.js';
import { Scheduler } from './scheduler.js';
import { schedulerRoutes } from './routes.js';

export async function startScheduler({ config, store, log, advertised }: RoleContext): Promise<StartedRole> {
  let scheduler: Scheduler | undefined;
  const server = await createRoleServer({
    role: 'scheduler',
    logger: log,
    readiness: async () => {
      await store.ping();
      return { store: store.description, leader: scheduler?.isLeader() ?? false };
    },
  });
  scheduler = new Scheduler({
    store,
    log,
    id: `${config.agent.machineId}:${advertised}`,
    address: advertised,
    leaseTtlSeconds: config.announceTtlSeconds,
    registry: { insecureRegistries: config.scheduler.insecureRegistries },
  });
  schedulerRoutes(server, scheduler);
  const started = scheduler;
  // The leader announces itself (src/roles/scheduler/leadership.ts); followers stay unannounced.
  return { ...fastifyRole(server, () => started.close()), selfAnnounced: true, start: () => started.start() };
}
