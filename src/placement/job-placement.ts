import { PlacementState, placeInstances, type PlacedUnit, type PlannerMachine, type ServiceRules } from './planner.js';

// Where a job runs, pure (no I/O): a job is placed as one more unit would be, by the planner's
// feasibility and ranking (a registered machine that is not drained, whose engine answers, with room
// in units, memory and CPUs), but it has no host port and conflicts with nothing. A job that must run
// on one machine (`--machine`, or where the service keeps its volumes) goes there or nowhere.

export interface JobPlacementInput {
  machines: PlannerMachine[];
  /** Every unit in the cluster now. */
  current: PlacedUnit[];
  /** Rules of every service that has units. */
  rules: ServiceRules[];
  /** The job's own rules (jobRules): what it reserves. */
  job: ServiceRules;
  /** The one machine it may run on, if any. */
  required?: string | undefined;
}

export type JobPlacement = { machine: string } | { refusal: string };

/** A job as placement counts it: its own name, what it reserves, no host port, no conflict. */
export const jobRules = (name: string, resources: { memoryMB?: number | undefined; cpus?: number | undefined } | undefined): ServiceRules => ({
  service: name,
  conflictsWith: '',
  hostPorts: [],
  memoryMB: resources?.memoryMB,
  cpus: resources?.cpus,
});

export function placeJob(input: JobPlacementInput): JobPlacement {
  const rules = [...input.rules.filter((rule) => rule.service !== input.job.service), input.job];
  if (input.required !== undefined) {
    const refusal = new PlacementState(input.machines, input.current, rules).admit(input.job.service, input.required);
    return refusal ? { refusal: `machine ${input.required} ${refusal}` } : { machine: input.required };
  }
  const result = placeInstances({ machines: input.machines, current: input.current, rules, service: input.job.service, instances: [1] });
  const placed = result.place[0];
  return placed ? { machine: placed.machine } : { refusal: result.unplaced[0]?.reason ?? `${input.job.service} fits on no machine` };
}
