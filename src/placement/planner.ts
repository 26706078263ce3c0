import { ConflictIndex } from './conflict-index.js';
import { MachineHeap } from './machine-heap.js';
import { compileServiceGlob } from '../service-glob.js';

// Pure placement, as in Nomad's scheduler: (cluster snapshot, wanted units) → placements. No I/O.
// Feasibility (may this machine take the unit: reachable, room, no conflict) and ranking (which
// feasible machine is best: the one the instance ran on, else the least loaded) are separate
// steps. Built for large clusters: machines sit in a heap by load, and conflicts are tracked as
// "machines blocked for service S", updated as units are placed, so a check is a lookup.

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

export interface Placement {
  instance: number;
  machine: string;
}

export interface PlaceResult {
  place: Placement[];
  /** Instances no machine can take, with the reason a person understands. */
  unplaced: { instance: number; reason: string }[];
}

/** Whether units of `a` and `b` may not share a machine (checked in both directions). */
export function conflicts(a: ServiceRules, b: ServiceRules): boolean {
  const matches = (glob: string, name: string) => glob !== '' && compileServiceGlob(glob)(name);
  if (matches(a.conflictsWith, b.service) || matches(b.conflictsWith, a.service)) return true;
  return a.hostPorts.some((port) => b.hostPorts.includes(port));
}

interface MachineState {
  machine: PlannerMachine;
  index: number;
  load: number;
  /** Units per service on this machine. */
  services: Map<string, number>;
}

/** The cluster as placement sees it; `place` adds units to it, so later placements count them. */
export class PlacementState {
  private readonly machines: MachineState[];
  private readonly byId: Map<string, MachineState>;
  private readonly conflicts: ConflictIndex;
  private readonly heap = new MachineHeap();
  /** For each service, the machines that run something it conflicts with (and how many such units). */
  private readonly blocked = new Map<string, Map<number, number>>();

  constructor(machines: PlannerMachine[], current: PlacedUnit[], rules: ServiceRules[]) {
    this.machines = machines.map((machine, index) => ({ machine, index, load: 0, services: new Map() }));
    this.byId = new Map(this.machines.map((state) => [state.machine.id, state]));
    const known = new Map(rules.map((rule) => [rule.service, rule]));
    for (const unit of current) if (!known.has(unit.service)) known.set(unit.service, { service: unit.service, conflictsWith: '', hostPorts: [] });
    this.conflicts = new ConflictIndex(known.values());
    for (const unit of current) {
      const state = this.byId.get(unit.machine);
      if (state) this.occupy(state, unit.service);
    }
    for (const state of this.machines) if (!state.machine.unavailable) this.heap.push({ load: state.load, index: state.index });
  }

  /** Places one unit for each of `instances` of `service`, preferring each instance's machine. */
  place(service: string, instances: number[], preferred?: ReadonlyMap<number, string>): PlaceResult {
    const result: PlaceResult = { place: [], unplaced: [] };
    for (const instance of instances) {
      const wanted = preferred?.get(instance);
      const sticky = wanted === undefined ? undefined : this.byId.get(wanted);
      const chosen = sticky && !this.refusal(sticky, service) ? sticky : this.leastLoadedFor(service);
      if (!chosen) {
        result.unplaced.push({ instance, reason: this.explain(service, instances.length - result.place.length) });
        continue;
      }
      this.occupy(chosen, service);
      this.heap.push({ load: chosen.load, index: chosen.index });
      result.place.push({ instance, machine: chosen.machine.id });
    }
    return result;
  }

  /** Why the machine cannot take a unit of `service`, or undefined when it can. */
  private refusal(state: MachineState, service: string): string | undefined {
    if (state.machine.unavailable) return state.machine.unavailable;
    if (state.load >= state.machine.capacity) return 'is full';
    if (!this.blocked.get(service)?.has(state.index)) return undefined;
    const conflicting = this.conflicts.conflictsOf(service);
    const clash = [...state.services.keys()].find((other) => conflicting.has(other));
    return `runs ${clash}, which conflicts`;
  }

  private leastLoadedFor(service: string): MachineState | undefined {
    const setAside: MachineState[] = [];
    let chosen: MachineState | undefined;
    for (let entry = this.heap.pop(); entry; entry = this.heap.pop()) {
      const state = this.machines[entry.index]!;
      if (entry.load !== state.load) continue; // stale: a newer entry for this machine is in the heap
      if (state.load >= state.machine.capacity) continue; // full for good in this plan
      if (this.blocked.get(service)?.has(state.index)) {
        setAside.push(state);
        continue;
      }
      chosen = state;
      break;
    }
    for (const state of setAside) this.heap.push({ load: state.load, index: state.index });
    return chosen;
  }

  private occupy(state: MachineState, service: string): void {
    state.load++;
    state.services.set(service, (state.services.get(service) ?? 0) + 1);
    // Every service that conflicts with this one is now blocked on this machine.
    for (const other of this.conflicts.conflictsOf(service)) {
      let machines = this.blocked.get(other);
      if (!machines) this.blocked.set(other, (machines = new Map()));
      machines.set(state.index, (machines.get(state.index) ?? 0) + 1);
    }
  }

  private explain(service: string, needed: number): string {
    if (this.machines.length === 0) return `${service} needs a machine, and no agent is registered`;
    const reasons = this.machines.map((state) => `${state.machine.id} ${this.refusal(state, service) ?? 'qualifies'}`).join('; ');
    const rules = this.conflicts.rulesOf(service);
    if (this.conflicts.conflictsOf(service).has(service)) {
      // Its units spread one per machine: count the machines that host one or could.
      const hosting = this.machines.filter((state) => state.services.has(service)).length;
      const qualifying = hosting + this.machines.filter((state) => !state.services.has(service) && !this.refusal(state, service)).length;
      const free = rules.conflictsWith ? ` free of ${rules.conflictsWith}` : ' with its host ports free';
      return `${service} needs ${hosting + needed} machines${free}; ${qualifying} qualify (${reasons})`;
    }
    return `${service} needs room for ${needed} more unit${needed === 1 ? '' : 's'}; no machine qualifies (${reasons})`;
  }
}

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

/** Places one new unit for each of `instances`, given every unit that runs now. */
export function placeInstances(input: PlaceInput): PlaceResult {
  return new PlacementState(input.machines, input.current, input.rules).place(input.service, input.instances, input.preferred);
}
