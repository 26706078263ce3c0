import { placeInstances, type Placement, type PlacedUnit, type PlannerMachine, type ServiceRules } from './planner.js';

// One step of a rolling update, as a pure function of what runs now (no I/O): which unit slots to
// retire and which instances get a unit of the target spec. The scheduler calls it again after
// every change it observes until the rollout is complete, so a lost event, a restarted scheduler
// or a superseded rollout simply continue from the state they find (level-triggered).

export interface RolloutUnit {
  instance: number;
  machine: string;
  spec: string;
  /** Its status is active/running now. */
  running: boolean;
  /** Running, and held for minReadySeconds. */
  ready: boolean;
  /** Its machine is registered (its agent's lease is alive). */
  alive: boolean;
  /** Its machine is being drained: it is replaced elsewhere like a unit of another spec (surge first). */
  evicted?: boolean;
}

export interface RolloutStepInput {
  service: string;
  /** numInstances of the target release. */
  instances: number;
  /** Spec hash of the target release. */
  spec: string;
  maxSurge: number;
  maxUnavailable: number;
  /** This service's assigned unit slots. */
  units: RolloutUnit[];
  machines: PlannerMachine[];
  /** Every unit in the cluster (all services), for placement. */
  cluster: PlacedUnit[];
  rules: ServiceRules[];
}

export interface RolloutStep {
  retire: RolloutUnit[];
  add: Placement[];
  unplaced: { instance: number; reason: string }[];
  /** Every instance has exactly one unit, of the target spec and ready, and nothing else is assigned. */
  complete: boolean;
}

/** A unit the rollout keeps: of the target spec, on a machine that is not being drained. */
const isTarget = (spec: string) => (unit: RolloutUnit) => unit.spec === spec && !unit.evicted;

const bestFirst = (a: RolloutUnit, b: RolloutUnit): number => Number(b.ready) - Number(a.ready) || Number(b.running) - Number(a.running);

/**
 * While a unit of the instance runs, units of other specs that do not (a superseded deployment's
 * unit that never became ready: crashing, pulling, failing its health check) serve nothing and
 * hold a surge slot the rollout needs: they go at once. Of several old units that run, the best
 * one is enough to keep serving until the target unit is ready.
 */
function retireIdleOldUnits(units: RolloutUnit[], spec: string, retire: Set<RolloutUnit>): void {
  if (!units.some((unit) => unit.running)) return;
  const old = units.filter((unit) => !isTarget(spec)(unit));
  for (const unit of old) if (!unit.running) retire.add(unit);
  for (const extra of old.filter((unit) => unit.running).sort(bestFirst).slice(1)) retire.add(extra);
}

export function planRolloutStep(input: RolloutStepInput): RolloutStep {
  const retire = new Set<RolloutUnit>();
  const byInstance = new Map<number, RolloutUnit[]>();
  // Units with volumes stay on their machine: one that is lost keeps its assignment (where its
  // data is) and is asked for again there, which the planner refuses with the reason.
  const pinned = input.rules.some((rule) => rule.service === input.service && rule.pinned);
  const stranded: number[] = [];
  for (const unit of input.units) {
    // Units of lost machines and instances above numInstances (highest first on scale down) go.
    if (unit.instance > input.instances) retire.add(unit);
    else if (!unit.alive && pinned) stranded.push(unit.instance);
    else if (!unit.alive) retire.add(unit);
    else byInstance.set(unit.instance, [...(byInstance.get(unit.instance) ?? []), unit]);
  }

  const needsUnit: number[] = [];
  let available = 0;
  for (let instance = 1; instance <= input.instances; instance++) {
    const units = byInstance.get(instance) ?? [];
    retireIdleOldUnits(units, input.spec, retire);
    const fresh = units.filter(isTarget(input.spec)).sort(bestFirst);
    // One target unit per instance: a duplicate (e.g. written by a scheduler that lost its lead) goes.
    for (const duplicate of fresh.slice(1)) retire.add(duplicate);
    const kept = fresh[0];
    if (kept?.ready) for (const old of units.filter((u) => !isTarget(input.spec)(u))) retire.add(old);
    if (kept?.ready || units.some((u) => u.running && !retire.has(u))) available++;
    if (!kept) needsUnit.push(instance);
  }

  const assigned = input.units.filter((unit) => !retire.has(unit)).length;
  let surge = input.instances + input.maxSurge - assigned;
  let unavailable = input.instances - available;
  const toPlace: number[] = [];
  for (const instance of needsUnit) {
    const old = (byInstance.get(instance) ?? []).filter((unit) => !retire.has(unit));
    const oldRunning = old.some((unit) => unit.running);
    if (old.length === 0) {
      // A new instance (scale up): it stays within numInstances + maxSurge.
      if (surge > 0) {
        toPlace.push(instance);
        surge--;
      }
    } else if (!oldRunning) {
      // Its old unit serves nothing (crashed, still starting): replacing it costs no availability.
      old.forEach((unit) => retire.add(unit));
      toPlace.push(instance);
    } else if (surge > 0) {
      toPlace.push(instance);
      surge--;
    } else if (unavailable < input.maxUnavailable) {
      old.forEach((unit) => retire.add(unit));
      unavailable++;
      toPlace.push(instance);
    }
  }

  const staying = input.cluster.filter(
    (unit) => unit.service !== input.service || input.units.some((u) => !retire.has(u) && u.instance === unit.instance && u.machine === unit.machine),
  );
  const preferred = new Map(input.units.map((unit) => [unit.instance, unit.machine]));
  toPlace.push(...stranded.filter((instance) => !toPlace.includes(instance)));
  const placed = placeInstances({ machines: input.machines, current: staying, rules: input.rules, service: input.service, instances: toPlace, preferred });
  if (pinned) {
    // A unit whose successor cannot go where its volumes are keeps running (and its assignment,
    // the record of where they are).
    const unplaced = new Set(placed.unplaced.map((u) => u.instance));
    for (const unit of [...retire]) if (unplaced.has(unit.instance) && unit.instance <= input.instances) retire.delete(unit);
  }

  const remaining = input.units.filter((unit) => !retire.has(unit));
  const complete =
    needsUnit.length === 0 &&
    retire.size === 0 &&
    remaining.length === input.instances &&
    remaining.every((unit) => isTarget(input.spec)(unit) && unit.ready);
  return { retire: [...retire], add: placed.place, unplaced: placed.unplaced, complete };
}
