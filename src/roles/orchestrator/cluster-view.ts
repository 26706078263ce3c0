import type { Store } from '../../store/store.js';
import { assignmentRoot, machineAwayPrefix, machineDrainPrefix, machinePrefix, unitStatusRoot } from '../../store/keys.js';
import { listRecords } from '../../store/json-records.js';
import type { Assignment, ClusterUnit, Machine, MachineAway, MachineDrain, UnitStatus } from '../../schemas/cluster.js';
import { slotOf } from '../../units.js';

/** Registered machines, each with its drain when an operator is draining it. */
export async function listMachines(store: Store): Promise<Machine[]> {
  const [machines, drains] = await Promise.all([listRecords<Machine>(store, machinePrefix), listRecords<MachineDrain>(store, machineDrainPrefix)]);
  const drainOf = new Map(drains.map((drain) => [drain.machine, drain]));
  return machines.map((machine) => joinMachine(machine, drainOf.get(machine.id))!);
}

/** A registered machine with its drain, if any; undefined for a drain of a machine not registered. */
export const joinMachine = (machine: Machine | undefined, drain: MachineDrain | undefined): Machine | undefined =>
  machine && drain ? { ...machine, drain } : machine;

/** An assignment (intent) joined with its agent's status; a status alone is a unit being stopped. */
export function joinUnit(assignment: Assignment | undefined, status: UnitStatus | undefined): ClusterUnit | undefined {
  const base = assignment ?? status;
  if (!base) return undefined;
  return {
    unit: base.unit,
    service: base.service,
    instance: base.instance,
    machine: base.machine,
    release: status?.release ?? base.release,
    spec: base.spec,
    image: status?.image ?? base.image,
    active: status?.active ?? 'inactive',
    sub: status?.sub ?? 'dead',
    ...(status?.address ? { address: status.address } : {}),
    restarts: status?.restarts ?? 0,
    ...(status?.error ? { error: status.error } : {}),
    ...(status?.errorKind ? { errorKind: status.errorKind } : {}),
    desired: assignment !== undefined,
  };
}

/** `<machine>/<unit>@<spec>`: where a unit slot's assignment and status meet. */
export const slotKey = (unit: { machine: string; unit: string; spec: string }): string => `${unit.machine}/${slotOf(unit)}`;

/**
 * A unit assigned to a machine whose agent is gone (its lease expired): nobody observes it, so
 * the listing says what is known. Units with volumes stay assigned there (the scheduler does not
 * move them), so this is what their listing shows until the machine returns. A machine whose
 * agent stopped on purpose says so (away, expected back): the scheduler's /readyz says until when.
 */
export function lostUnit(assignment: Assignment, away?: MachineAway): ClusterUnit {
  const why = assignment.volumes?.length
    ? `machine ${assignment.machine} is lost; the unit keeps its volumes there and is not moved (volumeMove: allowed moves it)`
    : away
      ? `machine ${assignment.machine} is away since ${away.since} (${away.reason}); its units stay for the scheduler's machine grace`
      : `machine ${assignment.machine} is lost`;
  return { ...joinUnit(assignment, undefined)!, active: 'failed', sub: 'failed', error: why, errorKind: 'machine-lost' };
}

export async function listClusterUnits(store: Store): Promise<ClusterUnit[]> {
  const [assignments, statuses, machines, away] = await Promise.all([
    listRecords<Assignment>(store, assignmentRoot),
    listRecords<UnitStatus>(store, unitStatusRoot),
    listRecords<Machine>(store, machinePrefix),
    listRecords<MachineAway>(store, machineAwayPrefix),
  ]);
  const awayOf = new Map(away.map((record) => [record.machine, record]));
  const statusOf = new Map(statuses.map((status) => [slotKey(status), status]));
  const assigned = new Set(assignments.map(slotKey));
  const registered = new Set(machines.map((machine) => machine.id));
  const units = [
    ...assignments.map((a) => (registered.has(a.machine) ? joinUnit(a, statusOf.get(slotKey(a)))! : lostUnit(a, awayOf.get(a.machine)))),
    ...statuses.filter((status) => !assigned.has(slotKey(status))).map((status) => joinUnit(undefined, status)!),
  ];
  return units.sort((a, b) => a.service.localeCompare(b.service) || a.instance - b.instance || a.machine.localeCompare(b.machine));
}
