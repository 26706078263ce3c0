import picomatch from 'picomatch';

// Pure placement, as in Nomad's scheduler: (cluster snapshot, wanted units) → plan. No I/O.
// Feasibility (may this machine take the unit?) and ranking (which feasible machine is best?)
// are separate steps so each can be read and tested alone.

export interface PlannerMachine {
  id: string;
  /** Most units the machine takes. */
  capacity: number;
  /** Why the machine can take no unit at all (e.g. its Docker engine is unreachable). */
  unavailable?: string;
}

export interface PlacedUnit {
  service: string;
  instance: number;
  machine: string;
}

export interface ServiceRules {
  service: string;
  /** Glob over service names; matching units never share a machine with this service's units. */
  conflictsWith: string;
  /** Host ports the service's units bind: two such units never share a machine. */
  hostPorts: number[];
}

export interface PlanInput {
  machines: PlannerMachine[];
  /** Every unit in the cluster now, of every service. */
  current: PlacedUnit[];
  /** Rules of every service that has units, and of the one being planned. */
  rules: ServiceRules[];
  service: string;
  instances: number;
}

export interface Placement {
  instance: number;
  machine: string;
  /** True when the instance stays on the machine it already runs on. */
  kept: boolean;
}

export interface Plan {
  place: Placement[];
  /** Current units of the service that are not wanted any more (highest instances, or misplaced). */
  stop: PlacedUnit[];
  /** Instances no machine can take, with the reason a person understands. */
  unplaced: { instance: number; reason: string }[];
}

const globCache = new Map<string, (name: string) => boolean>();
function globMatches(glob: string, name: string): boolean {
  if (!glob) return false;
  let matcher = globCache.get(glob);
  if (!matcher) {
    matcher = picomatch(glob);
    globCache.set(glob, matcher);
  }
  return matcher(name);
}

/** Whether units of `a` and `b` may not share a machine (checked in both directions). */
export function conflicts(a: ServiceRules, b: ServiceRules): boolean {
  if (globMatches(a.conflictsWith, b.service) || globMatches(b.conflictsWith, a.service)) return true;
  return a.hostPorts.some((port) => b.hostPorts.includes(port));
}

interface MachineLoad {
  machine: PlannerMachine;
  services: string[];
}

function feasible(load: MachineLoad, rules: ServiceRules, rulesOf: (service: string) => ServiceRules): string | undefined {
  if (load.machine.unavailable) return load.machine.unavailable;
  if (load.services.length >= load.machine.capacity) return 'is full';
  const clash = load.services.find((other) => conflicts(rules, rulesOf(other)));
  return clash ? `runs ${clash}, which conflicts` : undefined;
}

/** Least-loaded first; ties broken by id so plans are deterministic. */
const rank = (a: MachineLoad, b: MachineLoad): number =>
  a.services.length - b.services.length || (a.machine.id < b.machine.id ? -1 : a.machine.id > b.machine.id ? 1 : 0);

export function planService(input: PlanInput): Plan {
  const rulesByService = new Map(input.rules.map((rules) => [rules.service, rules]));
  const rulesOf = (service: string): ServiceRules => rulesByService.get(service) ?? { service, conflictsWith: '', hostPorts: [] };
  const rules = rulesOf(input.service);
  const loads = new Map<string, MachineLoad>(input.machines.map((machine) => [machine.id, { machine, services: [] }]));
  for (const unit of input.current) {
    if (unit.service !== input.service) loads.get(unit.machine)?.services.push(unit.service);
  }

  const plan: Plan = { place: [], stop: [], unplaced: [] };
  const existing = new Map(input.current.filter((unit) => unit.service === input.service).map((unit) => [unit.instance, unit]));
  for (const unit of existing.values()) if (unit.instance > input.instances) plan.stop.push(unit);

  // Keep healthy placements first, so that a redeploy does not move units needlessly.
  const toPlace: number[] = [];
  for (let instance = 1; instance <= input.instances; instance++) {
    const unit = existing.get(instance);
    const load = unit ? loads.get(unit.machine) : undefined;
    if (unit && load && !feasible(load, rules, rulesOf)) {
      load.services.push(input.service);
      plan.place.push({ instance, machine: unit.machine, kept: true });
    } else {
      if (unit) plan.stop.push(unit);
      toPlace.push(instance);
    }
  }

  for (const instance of toPlace) {
    const candidates = [...loads.values()].filter((load) => !feasible(load, rules, rulesOf)).sort(rank);
    const chosen = candidates[0];
    if (!chosen) {
      plan.unplaced.push({ instance, reason: explainUnplaced(input, [...loads.values()], rules, rulesOf) });
      continue;
    }
    chosen.services.push(input.service);
    plan.place.push({ instance, machine: chosen.machine.id, kept: false });
  }
  return plan;
}

function explainUnplaced(input: PlanInput, loads: MachineLoad[], rules: ServiceRules, rulesOf: (s: string) => ServiceRules): string {
  if (loads.length === 0) return `${input.service} needs a machine, and no agent is registered`;
  const reasons = loads.map((load) => `${load.machine.id} ${feasible(load, rules, rulesOf) ?? 'qualifies'}`);
  const qualifying = loads.filter((load) => !load.machine.unavailable).length;
  const constraint = rules.conflictsWith ? ` free of ${rules.conflictsWith}` : '';
  return `${input.service} needs ${input.instances} machine slots${constraint}; ${qualifying} of ${loads.length} machines are usable (${reasons.join('; ')})`;
}
