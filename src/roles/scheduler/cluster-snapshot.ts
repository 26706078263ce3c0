import type { Store } from '../../store/store.js';
import { assignmentRoot, machineDrainPrefix, machinePrefix, servicePrefix, unitStatusRoot } from '../../store/keys.js';
import { listRecords } from '../../store/json-records.js';
import type { Assignment, Machine, MachineDrain, UnitStatus } from '../../schemas/cluster.js';
import type { Service } from '../../schemas/service.js';
import type { PlannerMachine, ServiceRules } from '../../placement/planner.js';

/** What the scheduler reads before it plans: every machine, assignment and service, and the drained machines. */
export interface ClusterSnapshot {
  machines: Machine[];
  assignments: Assignment[];
  services: Service[];
  /** Ids of machines being drained. */
  drained: Set<string>;
}

export async function readClusterSnapshot(store: Store): Promise<ClusterSnapshot> {
  const [machines, assignments, services, drained] = await Promise.all([
    listRecords<Machine>(store, machinePrefix),
    listRecords<Assignment>(store, assignmentRoot),
    listRecords<Service>(store, servicePrefix),
    readDrainedMachines(store),
  ]);
  return { machines, assignments, services, drained };
}

export const readDrainedMachines = async (store: Store): Promise<Set<string>> =>
  new Set((await listRecords<MachineDrain>(store, machineDrainPrefix)).map((drain) => drain.machine));

export const readUnitStatuses = (store: Store): Promise<UnitStatus[]> => listRecords<UnitStatus>(store, unitStatusRoot);

export const plannerMachine = (machine: Machine, drained: ReadonlySet<string>): PlannerMachine => ({
  id: machine.id,
  capacity: machine.capacity.units,
  ...(drained.has(machine.id)
    ? { unavailable: 'is being drained' }
    : machine.docker.reachable
      ? {}
      : { unavailable: `cannot run units: Docker engine unreachable (${machine.docker.error ?? 'no reason given'})` }),
});

export const serviceRules = (service: Pick<Service, 'name' | 'conflictsWith' | 'config'>): ServiceRules => ({
  service: service.name,
  conflictsWith: service.conflictsWith,
  hostPorts: service.config.ports.flatMap((port) => (port.host === undefined ? [] : [port.host])),
});
