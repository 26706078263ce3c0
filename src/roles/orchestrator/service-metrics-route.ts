import type { FastifyRequest } from 'fastify';
import type { RoleServer } from '../../http/server.js';
import type { PeerClient } from '../../http/peer-client.js';
import { request as undiciRequest } from '../../http/undici-request.js';
import { HttpError } from '../../http/errors.js';
import type { Store } from '../../store/store.js';
import { apiRoute } from '../../schemas/api.js';
import type { AgentUsage, GatewayTraffic, ServiceMetrics, UnitUsage } from '../../schemas/service-metrics.js';
import { passedOnAuthorization } from '../../auth/caller.js';
import { listComponentVersions } from '../../store/records/component-versions.js';
import { trafficSeries } from '../../metrics-history/service-series.js';
import { listClusterUnits, listMachines } from './cluster-view.js';

// `GET /services/:name/metrics`: the service's last hour for the dashboard's graphs. The figures
// stay where they are made (docs/architecture.md "Graphs"): every gateway's request counts, and
// the CPU and memory the agents of the machines running the service's units read. Each is asked
// with the caller's own credentials, as the log tails are; one that does not answer is named in
// the reply and its share is missing, rather than the whole graph.

const PEER_TIMEOUT_MS = 3_000;

async function peerJson<T>(url: string, authorization: string | undefined): Promise<T> {
  const response = await undiciRequest(url, { headersTimeout: PEER_TIMEOUT_MS, bodyTimeout: PEER_TIMEOUT_MS, headers: authorization === undefined ? {} : { authorization } });
  if (response.statusCode !== 200) {
    await response.body.dump();
    throw new Error(`answered ${response.statusCode}`);
  }
  return (await response.body.json()) as T;
}

export function serviceMetricsRoute(server: RoleServer, store: Store, directory: PeerClient, intervalSeconds: number): void {
  server.route({
    ...apiRoute('GET /services/:name/metrics'),
    handler: async (request) => {
      const { name } = request.params;
      await directory.actingFor(request).call('GET', `/services/${encodeURIComponent(name)}`);
      return collectMetrics(store, request, name, intervalSeconds);
    },
  });
}

async function collectMetrics(store: Store, request: FastifyRequest, service: string, intervalSeconds: number): Promise<ServiceMetrics> {
  const authorization = passedOnAuthorization(request.headers);
  const [components, units, machines] = await Promise.all([listComponentVersions(store), listClusterUnits(store), listMachines(store)]);
  const gateways = components.filter((component) => component.role === 'gateway');
  const serviceMachines = new Set(units.filter((unit) => unit.service === service).map((unit) => unit.machine));
  const agents = machines.filter((machine) => serviceMachines.has(machine.id));
  const unreachable: string[] = [];
  const [traffic, usage] = await Promise.all([
    Promise.all(
      gateways.map((gateway) =>
        peerJson<GatewayTraffic>(`http://${gateway.address}/traffic`, authorization).catch((error: unknown) => {
          unreachable.push(`gateway at ${gateway.address}: ${(error as Error).message}`);
          return undefined;
        }),
      ),
    ),
    Promise.all(
      agents.map((machine) =>
        peerJson<AgentUsage>(`http://${machine.address}/unit-usage?service=${encodeURIComponent(service)}`, authorization).catch((error: unknown) => {
          unreachable.push(`agent of machine ${machine.id} at ${machine.address}: ${(error as Error).message}`);
          return undefined;
        }),
      ),
    ),
  ]);
  const answered = traffic.filter((gateway): gateway is GatewayTraffic => gateway !== undefined);
  const unitUsage: UnitUsage[] = usage.flatMap((agent) => agent?.units ?? []);
  if (gateways.length + agents.length > 0 && answered.length === 0 && unitUsage.length === 0 && unreachable.length === gateways.length + agents.length) {
    throw new HttpError(502, `no gateway or agent answered for the figures of ${service}: ${unreachable.join('; ')}`);
  }
  return {
    service,
    intervalSeconds,
    traffic: trafficSeries(service, answered, intervalSeconds, Date.now()),
    units: unitUsage.sort((a, b) => a.unit.localeCompare(b.unit, 'en', { numeric: true }) || a.machine.localeCompare(b.machine)),
    unreachable: unreachable.sort(),
  };
}
