import { createRoleServer } from '../../http/server.js';
import { apiConnectionLimits } from '../../http/connection-limits.js';
import { fastifyRole, storeReadiness, type RoleContext, type StartedRole } from '../role.js';
import { startAgent } from './agent.js';
import { listenedPorts } from '../../config.js';
import { Type } from '@sinclair/typebox';
import { UnitUsageSampler } from './unit-usage.js';
import { AgentUsage } from '../../schemas/service-metrics.js';
import { ServiceName } from '../../schemas/common.js';

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
  const usage = new UnitUsageSampler(agent.docker, agent.machineId, config.metricsIntervalSeconds, log);
  server.get(
    '/unit-usage',
    {
      schema: {
        description: "The last hour of this machine's units' CPU (cores) and memory (bytes), one point per --metrics-interval; `service` keeps one service's units.",
        querystring: Type.Object({ service: Type.Optional(ServiceName) }),
        response: { 200: AgentUsage },
      },
    },
    async (request) => ({ intervalSeconds: usage.intervalSeconds, units: usage.usage(request.query.service) }),
  );
  usage.start();
  return fastifyRole(server, async () => {
    await usage.close();
    await agent.close();
  });
}
