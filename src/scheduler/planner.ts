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

/** Why the machine cannot take a unit of `rules.service`, or undefined when it can. */
function refusal(load: MachineLoad, rules: ServiceRules, rulesOf: (service: string) => ServiceRules): string | undefined {
  if (load.machine.unavailable) return load.machine.unavailable;
  if (load.services.length >= load.machine.capacity) return 'is full';
  const clash = load.services.find((other) => conflicts(rules, rulesOf(other)));
  return clash ? `runs ${clash}, which conflicts` : undefined;
}

/** Least-loaded first; ties broken by id so plans are deterministic. */
const rank = (a: MachineLoad, b: MachineLoad): number =>
  a.services.length - b.services.length || (a.machine.id < b.machine.id ? -1 : a.machine.id > b.machine.id ? 1 : 0);

export interface PlaceInput {
  machines: PlannerMachine[];
  /** Every unit in the cluster now, of every service, the planned service's own included. */
  current: PlacedUnit[];
  /** Rules of every service that has units, and of the one being planned. */
  rules: ServiceRules[];
  service: string;
  /** Instance numbers that need a (new) unit. */
  instances: number[];
  /** Machine each instance should stay on when it still qualifies (where its unit runs now). */
  preferred?: ReadonlyMap<number, string>;
}

export interface Placement {
  instance: number;
  machine: string;
}

export interface PlaceResult {
  place: Placement[];
  /** Instances no machine can take, with the reason a person understands. */
  unplaced: { instance: number; reason: string }[];
}

/**
 * Places one new unit for each of `instances`, given every unit that runs now. Placed units
 * count for the next ones, so a self-conflicting glob spreads them and capacity holds.
 */
export function placeInstances(input: PlaceInput): PlaceResult {
  const rulesByService = new Map(input.rules.map((rules) => [rules.service, rules]));
  const rulesOf = (service: string): ServiceRules => rulesByService.get(service) ?? { service, conflictsWith: '', hostPorts: [] };
  const rules = rulesOf(input.service);
  const loads = new Map<string, MachineLoad>(input.machines.map((machine) => [machine.id, { machine, services: [] }]));
  for (const unit of input.current) loads.get(unit.machine)?.services.push(unit.service);

  const result: PlaceResult = { place: [], unplaced: [] };
  for (const instance of input.instances) {
    const candidates = [...loads.values()].filter((load) => !refusal(load, rules, rulesOf));
    const preferred = input.preferred?.get(instance);
    const chosen = candidates.find((load) => load.machine.id === preferred) ?? candidates.sort(rank)[0];
    if (!chosen) {
      result.unplaced.push({ instance, reason: explainUnplaced(input, [...loads.values()], rules, rulesOf) });
      continue;
    }
    chosen.services.push(input.service);
    result.place.push({ instance, machine: chosen.machine.id });
  }
  return result;
}

function explainUnplaced(input: PlaceInput, loads: MachineLoad[], rules: ServiceRules, rulesOf: (s: string) => ServiceRules): string {
  if (loads.length === 0) return `${input.service} needs a machine, and no agent is registered`;
  const reasons = loads.map((load) => `${load.machine.id} ${refusal(load, rules, rulesOf) ?? 'qualifies'}`);
  const qualifying = loads.filter((load) => !refusal(load, rules, rulesOf)).length;
  const needed = input.instances.length;
  const constraint = rules.conflictsWith ? ` free of ${rules.conflictsWith}` : '';
  return `${input.service} needs ${needed} more machine slot${needed === 1 ? '' : 's'}${constraint}; ${qualifying} of ${loads.length} machines qualify (${reasons.join('; ')})`;
}
