import { createRoleServer } from '../../http/server.js';
import { apiConnectionLimits } from '../../http/connection-limits.js';
import { fastifyRole, storeReadiness, type RoleContext, type StartedRole } from '../role.js';
import { startAgent } from './agent.js';
import { listenedPorts } from '../../config.js';

export async function startAgentRole({ config, store, log, advertised, access }: RoleContext): Promise<StartedRole> {
  let readiness = storeReadiness(store);
  const server = await createRoleServer({ role: 'agent', logger: log, access, limits: apiConnectionLimits(config.http), readiness: () => readiness() });
  const agent = await startAgent({
    store,
    server,
    log,
    machineId: config.agent.machineId,
    address: advertised,
    unitHost: config.agent.unitHost,
    network: config.agent.network,
    ...(config.agent.dockerHost ? { dockerHost: config.agent.dockerHost } : {}),
    labels: config.agent.labels,
    leaseTtlSeconds: config.announceTtlSeconds,
    stopGraceSeconds: config.agent.stopGraceSeconds,
    drainSeconds: config.agent.drainSeconds,
    unitLogs: config.agent.unitLogs,
    platformPorts: listenedPorts(config),
    hostNetworkUser: config.agent.hostNetworkUser,
    defaultMemoryMB: config.agent.defaultMemoryLimitMB,
    capacityUnits: config.agent.maxUnits,
    resources: {
      reserveMemoryMB: config.agent.reserveMemoryMB,
      reserveCpus: config.agent.reserveCpus,
      ...(config.agent.capacityMemoryMB === undefined ? {} : { capacityMemoryMB: config.agent.capacityMemoryMB }),
      ...(config.agent.capacityCpus === undefined ? {} : { capacityCpus: config.agent.capacityCpus }),
    },
  });
  readiness = () => agent.readiness();
  return fastifyRole(server, () => agent.close());
}
