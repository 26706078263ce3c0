import type { Store } from '../../store/store.js';
import { assignmentRoot, machinePrefix, servicePrefix, unitStatusRoot } from '../../store/keys.js';
import { listRecords } from '../../store/json-records.js';
import type { Assignment, Machine, UnitStatus } from '../../schemas/cluster.js';
import type { Service } from '../../schemas/service.js';
import type { PlannerMachine, ServiceRules } from '../../scheduler/planner.js';

/** What the scheduler reads before it plans: every machine, assignment and service. */
export interface ClusterSnapshot {
  machines: Machine[];
  assignments: Assignment[];
  services: Service[];
}

export async function readClusterSnapshot(store: Store): Promise<ClusterSnapshot> {
  const [machines, assignments, services] = await Promise.all([
    listRecords<Machine>(store, machinePrefix),
    listRecords<Assignment>(store, assignmentRoot),
    listRecords<Service>(store, servicePrefix),
  ]);
  return { machines, assignments, services };
}

export const readUnitStatuses = (store: Store): Promise<UnitStatus[]> => listRecords<UnitStatus>(store, unitStatusRoot);

export const plannerMachine = (machine: Machine): PlannerMachine => ({
  id: machine.id,
  capacity: machine.capacity.units,
  ...(machine.docker.reachable ? {} : { unavailable: `cannot run units: Docker engine unreachable (${machine.docker.error ?? 'no reason given'})` }),
});

export const serviceRules = (service: Pick<Service, 'name' | 'conflictsWith' | 'config'>): ServiceRules => ({
  service: service.name,
  conflictsWith: service.conflictsWith,
  hostPorts: service.config.ports.flatMap((port) => (port.host === undefined ? [] : [port.host])),
});
