// Handover deploys (`rollout.strategy: handover`, docs/deploys.md): which unit is handed over next,
// and how a handover's time is shared. Pure: the scheduler's deploys/handover.ts does the I/O.

/** What the choice reads of an assigned unit slot. */
export interface HandoverUnit {
  instance: number;
  spec: string;
}

/**
 * The unit to hand over next: the lowest instance the release keeps (1..instances) that runs
 * another spec and has no unit of the target spec beside it. Units above `instances` and missing
 * instances are left to the plain rollout that follows the handovers (they have no predecessor).
 */
export function nextHandover<T extends HandoverUnit>(units: readonly T[], instances: number, spec: string): T | undefined {
  const current = new Set(units.filter((unit) => unit.spec === spec).map((unit) => unit.instance));
  return units
    .filter((unit) => unit.instance <= instances && unit.spec !== spec && !current.has(unit.instance))
    .sort((a, b) => a.instance - b.instance)[0];
}

/** Part of a handover's time kept to start the old unit again should the new one fail: half, at most 10 s. */
export const restoreReserveMs = (timeoutMs: number): number => Math.min(10_000, Math.floor(timeoutMs / 2));

/**
 * When the scheduler stops waiting for the new unit to be ready: early enough that the old unit,
 * started again, can take the held requests before the gateways stop holding them.
 */
export const readyDeadline = (holdStart: number, timeoutMs: number): number => holdStart + timeoutMs - restoreReserveMs(timeoutMs);
