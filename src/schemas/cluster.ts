import { Type, type Static } from '@sinclair/typebox';
import { literalUnion } from './common.js';
import { Env, PortMapping, Resources, Volume } from './service.js';
import { unitActiveStates, unitSubStates } from './states.js';

// Machines, assignments (intent, written by the scheduler) and unit status (observed, written by agents).

/** A machine id (`--machine-id`, /etc/machine-id): it becomes part of store keys. */
export const machineIdPattern = '^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$';
export const MachineId = Type.String({ pattern: machineIdPattern, description: '1-128 letters, digits, "_", "." or "-"' });
export const MachineParams = Type.Object({ id: MachineId });
export type MachineParams = Static<typeof MachineParams>;

/** An operator's drain of a machine (stored at machineDrainKey). */
export const MachineDrain = Type.Object({
  machine: Type.String(),
  since: Type.String(),
  reason: Type.Optional(Type.String()),
});
export type MachineDrain = Static<typeof MachineDrain>;

/**
 * A machine whose agent stopped on purpose and is expected back (stored at machineAwayKey): the
 * scheduler counts its units as in place until `since` plus its machine grace.
 */
export const MachineAway = Type.Object({
  machine: Type.String(),
  /** When the agent stopped (ISO time, the agent's clock). */
  since: Type.String({ format: 'date-time' }),
  /** Why, for people ("its agent stopped"). */
  reason: Type.String(),
});
export type MachineAway = Static<typeof MachineAway>;

export const MachineDrainRequest = Type.Object({ reason: Type.Optional(Type.String({ maxLength: 200 })) }, { additionalProperties: false });
export type MachineDrainRequest = Static<typeof MachineDrainRequest>;

export const Machine = Type.Object({
  id: Type.String(),
  /** host:port of the agent's API. */
  address: Type.String(),
  /** Host name or IP units are reached at. */
  host: Type.String(),
  labels: Type.Record(Type.String(), Type.String()),
  network: Type.Union([Type.Literal('bridge'), Type.Literal('host')]),
  docker: Type.Object({
    reachable: Type.Boolean(),
    version: Type.Optional(Type.String()),
    error: Type.Optional(Type.String()),
    /** Since when the agent has found no engine (ISO time; absent while one answers). */
    unreachableSince: Type.Optional(Type.String()),
  }),
  /**
   * What the machine takes: units, and (when known) memory and CPUs for units: the engine's
   * total less the agent's reserve (--reserve-memory, --reserve-cpus), or the operator's cap.
   */
  capacity: Type.Object({ units: Type.Integer(), memoryMB: Type.Optional(Type.Integer()), cpus: Type.Optional(Type.Number()) }),
  /** Ports the platform's roles listen on at this machine beyond PLATFORM_PORTS (the agent's own, a gateway moved elsewhere): no unit's host port. */
  platformPorts: Type.Optional(Type.Array(Type.Integer())),
  unitCount: Type.Integer(),
  startedAt: Type.String(),
  updatedAt: Type.String(),
  /** Set in listings while an operator drains the machine (the agent never writes it). */
  drain: Type.Optional(MachineDrain),
});
export type Machine = Static<typeof Machine>;

/** What names one unit slot, in intent (Assignment), status (UnitStatus) and listings alike. */
export const unitSlotFields = {
  unit: Type.String(),
  service: Type.String(),
  instance: Type.Integer(),
  machine: Type.String(),
  release: Type.Integer(),
  /** Hash of image, env and ports (src/units.ts): the slot's identity beside the unit name. */
  spec: Type.String(),
  /** Image pinned to a digest: registry/repository@sha256:… */
  image: Type.String(),
};

export const UnitSlot = Type.Object(unitSlotFields);
export type UnitSlot = Static<typeof UnitSlot>;

/**
 * One unit the scheduler wants on one machine. Closed: the agent refuses one with any other field
 * (src/roles/agent/assignment-check.ts), since whoever writes the store could ask for privileged
 * mode or host paths that way, and no declaration can.
 */
export const Assignment = Type.Object(
  {
    ...unitSlotFields,
    ports: Type.Array(PortMapping),
    env: Env,
    /** Seconds between SIGTERM and SIGKILL when the unit stops. */
    stopGraceSeconds: Type.Integer(),
    healthCheck: Type.Optional(Type.Object({ path: Type.String() }, { additionalProperties: false })),
    /** The container's limits; the planner counts them against the machine's capacity. */
    resources: Type.Optional(Resources),
    /** Named volumes (`<service>.<instance>.<name>`, made by the agent): names and paths as a declaration allows, nothing else. */
    volumes: Type.Optional(Type.Array(Volume, { maxItems: 16 })),
    deployment: Type.String(),
    assignedAt: Type.String(),
  },
  { additionalProperties: false },
);
export type Assignment = Static<typeof Assignment>;

/**
 * Why a unit is not running, for code to branch on (the agent writes it beside `error`, which is
 * for people): the scheduler fails a rollout on `image-pull`, `engine-unreachable` and `refused`
 * (the agent would not run the assignment: it asks for what no declaration can) at once, and on a
 * unit that failed after 3 restarts whatever its kind; the others are waits.
 */
export const UnitFailureKind = Type.Union([
  Type.Literal('image-pull'),
  Type.Literal('engine-unreachable'),
  Type.Literal('container-start'),
  Type.Literal('crash-loop'),
  Type.Literal('health-check'),
  Type.Literal('port-publish'),
  Type.Literal('refused'),
  Type.Literal('out-of-memory'),
  /** Set in listings (not by an agent): the unit's machine is gone. */
  Type.Literal('machine-lost'),
]);
export type UnitFailureKind = Static<typeof UnitFailureKind>;

export const UnitActiveState = literalUnion(unitActiveStates);
export type UnitActiveState = Static<typeof UnitActiveState>;
export const UnitSubState = literalUnion(unitSubStates);
export type UnitSubState = Static<typeof UnitSubState>;

/** What an agent observes of a unit slot, in its status and in listings alike. */
const unitStateFields = {
  active: UnitActiveState,
  sub: UnitSubState,
  /** host:port the unit answers on, once known. */
  address: Type.Optional(Type.String()),
  restarts: Type.Integer(),
  /** For people: what went wrong or what the unit waits for. */
  error: Type.Optional(Type.String()),
  /** For code: the kind of `error`. */
  errorKind: Type.Optional(UnitFailureKind),
};

export const UnitStatus = Type.Object({
  ...unitSlotFields,
  ...unitStateFields,
  containerId: Type.Optional(Type.String()),
  /**
   * When the slot last turned failed, kept through its restarts until it runs again: one failure
   * episode, which the schedulers tell once (src/notifications/events.ts derives its id from it).
   */
  failingSince: Type.Optional(Type.String()),
  updatedAt: Type.String(),
});
export type UnitStatus = Static<typeof UnitStatus>;

/** A unit as listed to people: intent (assignment) joined with what the agent reports. */
export const ClusterUnit = Type.Object({
  ...unitSlotFields,
  ...unitStateFields,
  /** False while the unit runs but is no longer assigned (it is being stopped). */
  desired: Type.Boolean(),
});
export type ClusterUnit = Static<typeof ClusterUnit>;
