import { createRoleServer } from '../../http/server.js';
import { apiConnectionLimits } from '../../http/connection-limits.js';
import { fastifyRole, type RoleContext, type StartedRole } from '../role.js';
import { Scheduler } from './scheduler.js';
import { schedulerRoutes } from './routes.js';
import { registerWebhooks } from './webhooks/routes.js';
import { credentialFor } from '../../auth/registry-credentials.js';

export async function startScheduler({ config, store, log, advertised, access, storeSpace, writeBudget }: RoleContext): Promise<StartedRole> {
  storeSpace.watch();
  const scheduler = new Scheduler({
    store,
    log,
    id: `${config.agent.machineId}:${advertised}`,
    address: advertised,
    announce: config.announce,
    leaseTtlSeconds: config.announceTtlSeconds,
    registry: {
      insecureRegistries: config.scheduler.insecureRegistries,
      allowedRegistries: config.scheduler.allowedRegistries,
      credentials: (registry) => credentialFor(store, registry),
    },
    retention: config.scheduler.retention,
    notify: { ...config.scheduler.notify, allowedDestinations: config.allowedNotificationDestinations },
    engineGraceSeconds: config.scheduler.engineGraceSeconds,
    machineGraceMs: config.scheduler.machineGraceMs,
    ...(config.scheduler.backups ? { backups: config.scheduler.backups } : {}),
    backupDir: config.scheduler.backupDir,
  });
  const server = await createRoleServer({
    // The unfenced store: a follower journals the calls it takes too.
    journal: store,
    role: 'scheduler',
    access,
    limits: apiConnectionLimits(config.http),
    logger: log,
    readiness: async () => {
      await store.ping();
      return { store: store.description, leader: scheduler.isLeader(), ...scheduler.healingState(), ...(await scheduler.backupState()), ...(await storeSpace.readiness()) };
    },
    health: () => ({ leader: scheduler.isLeader() }),
  });
  schedulerRoutes(server, scheduler, { space: storeSpace, budget: writeBudget });
  await registerWebhooks(server, { deployer: scheduler, store, log, secrets: config.scheduler.webhooks, listenHost: config.host });
  // The leader announces itself (src/roles/scheduler/leadership.ts); followers stay unannounced.
  return { ...fastifyRole(server, () => scheduler.close()), selfAnnounced: true, start: () => scheduler.start() };
}
