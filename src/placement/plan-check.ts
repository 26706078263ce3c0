import { PlacementState, type Placement, type PlacedUnit, type PlannerMachine, type ServiceRules } from './planner.js';

// The plan applier's check, pure (no I/O): may these new units of one service go where the plan
// puts them, given every unit that runs now? A plan was made from a snapshot that other plans
// committed since may have outdated (two services deployed at once, a lost machine's units healed
// while another service deploys), so it is checked again against the newest state, with the
// planner's own rules (planner.ts: the machine is registered and not drained, its engine answers,
// it has room in units, memory and CPUs, and no unit there conflicts with the new one, by either
// side's conflictsWith or a shared host port). Only added units are checked: a plan that
// removes units or relabels them in place never makes a machine fuller.

export interface PlanCheckInput {
  machines: PlannerMachine[];
  /** Every unit in the cluster now, of every service, less those the plan removes. */
  current: PlacedUnit[];
  /** Rules of every service that has units, and of the plan's own service (as its target release has them). */
  rules: ServiceRules[];
  service: string;
  /** The units the plan adds. */
  place: Placement[];
}

export interface PlanRefusal {
  instance: number;
  machine: string;
  /** Why, for a person: "api-2 does not fit on m1, which runs web, which conflicts". */
  reason: string;
}

/** The added units that do not fit, each checked after the ones before it were counted; empty when the plan may be committed. */
export function checkPlan(input: PlanCheckInput): PlanRefusal[] {
  const state = new PlacementState(input.machines, input.current, input.rules);
  const refusals: PlanRefusal[] = [];
  for (const placement of input.place) {
    const reason = state.admit(input.service, placement.machine);
    if (reason) refusals.push({ ...placement, reason: `${input.service}-${placement.instance} does not fit on ${placement.machine}, which ${reason}` });
  }
  return refusals;
}
