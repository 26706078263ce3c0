import { Type, type Static } from '@sinclair/typebox';
import type { Store } from '../../store/store.js';
import { assignmentRoot, machinePrefix, unitStatusRoot } from '../../store/keys.js';
import { listRecords } from '../../store/json-records.js';
import { unitSlotFields, type Assignment, type Machine, type UnitStatus } from '../../schemas/cluster.js';
import { slotOf } from '../../units.js';

/** A unit as listed to people: intent (assignment) joined with what the agent reports. */
export const ClusterUnit = Type.Object({
  ...unitSlotFields,
  active: Type.String(),
  sub: Type.String(),
  address: Type.Optional(Type.String()),
  restarts: Type.Integer(),
  error: Type.Optional(Type.String()),
  /** False while the unit runs but is no longer assigned (it is being stopped). */
  desired: Type.Boolean(),
});
export type ClusterUnit = Static<typeof ClusterUnit>;

export const listMachines = (store: Store): Promise<Machine[]> => listRecords<Machine>(store, machinePrefix);

export async function listClusterUnits(store: Store): Promise<ClusterUnit[]> {
  const [assignments, statuses] = await Promise.all([
    listRecords<Assignment>(store, assignmentRoot),
    listRecords<UnitStatus>(store, unitStatusRoot),
  ]);
  const slotKey = (unit: { machine: string; unit: string; spec: string }) => `${unit.machine}/${slotOf(unit)}`;
  const statusOf = new Map(statuses.map((status) => [slotKey(status), status]));
  const units: ClusterUnit[] = assignments.map((a) => {
    const status = statusOf.get(slotKey(a));
    statusOf.delete(slotKey(a));
    return {
      unit: a.unit,
      service: a.service,
      instance: a.instance,
      machine: a.machine,
      release: status?.release ?? a.release,
      spec: a.spec,
      image: status?.image ?? a.image,
      active: status?.active ?? 'inactive',
      sub: status?.sub ?? 'dead',
      ...(status?.address ? { address: status.address } : {}),
      restarts: status?.restarts ?? 0,
      ...(status?.error ? { error: status.error } : {}),
      desired: true,
    };
  });
  for (const status of statusOf.values()) {
    units.push({ ...status, desired: false });
  }
  return units.sort((a, b) => a.service.localeCompare(b.service) || a.instance - b.instance || a.machine.localeCompare(b.machine));
}
