import { ConflictIndex } from './conflict-index.js';
import { MachineHeap } from './machine-heap.js';
import { compileServiceGlob } from '../service-glob.js';
import { PLATFORM_PORTS } from '../schemas/service.js';

// Pure placement, as in Nomad's scheduler: (cluster snapshot, wanted units) → placements. No I/O.
// Feasibility (may this machine take the unit: reachable, room in units, memory and CPUs, no
// conflict) and ranking (which feasible machine is best: the one the instance ran on, else the
// least used for `spread`, the most used for `binpack`, by the dominant share of units, memory
// and CPUs) are separate steps. Built for large
// clusters: machines sit in a heap by load, and conflicts are tracked as "machines blocked for
// service S", updated as units are placed, so a check is a lookup.

export interface PlannerMachine {
  id: string;
  /** Most units the machine takes. */
  capacity: number;
  /** Memory for units, in MB; undefined: not counted (any amount fits). */
  memoryMB?: number | undefined;
  /** CPUs for units; undefined: not counted. */
  cpus?: number | undefined;
  /** Why the machine can take no unit at all (e.g. its Docker engine is unreachable). */
  unavailable?: string;
  /** Ports the platform listens on there besides PLATFORM_PORTS (its agent's, a gateway's moved elsewhere). */
  platformPorts?: readonly number[] | undefined;
}

export interface PlacedUnit {
  service: string;
  instance: number;
  machine: string;
  /** What the unit reserves (its assignment's resources). */
  memoryMB?: number | undefined;
  cpus?: number | undefined;
}

export interface ServiceRules {
  service: string;
  /** Glob over service names; matching units never share a machine with this service's units. */
  conflictsWith: string;
  /** Host ports the service's units bind: two such units never share a machine. */
  hostPorts: number[];
  /** What each new unit of the service reserves. */
  memoryMB?: number | undefined;
  cpus?: number | undefined;
  /** Ranking: the least loaded machine (default) or the fullest that has room. */
  placement?: 'spread' | 'binpack' | undefined;
  /** Its units keep volumes: an instance that ran somewhere is placed there or nowhere. */
  pinned?: boolean | undefined;
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

/** What one unit takes of a machine; CPUs in thousandths, so sums of 0.1 stay exact. */
interface Need {
  memoryMB: number;
  milliCpus: number;
}

const needOf = (unit: { memoryMB?: number | undefined; cpus?: number | undefined }): Need => ({
  memoryMB: unit.memoryMB ?? 0,
  milliCpus: Math.round((unit.cpus ?? 0) * 1000),
});

const formatCpus = (milliCpus: number): string => {
  const cpus = milliCpus / 1000;
  return `${cpus} CPU${cpus === 1 ? '' : 's'}`;
};

interface MachineState {
  machine: PlannerMachine;
  index: number;
  load: number;
  /** Memory (MB) and CPUs (thousandths) its units reserve. */
  memoryMB: number;
  milliCpus: number;
  /** Undefined when the machine does not count it. */
  memoryLimit: number | undefined;
  milliCpuLimit: number | undefined;
  /**
   * How used the machine is: its fullest share of units, memory and CPUs (the dominant share).
   * The heap's key: ranking by it puts the machine with the most room on top, so a unit that
   * needs memory rarely meets a machine it does not fit on before one it does.
   */
  rank: number;
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
  /** The least any known service's unit reserves: a machine with less free takes no more units in this plan. */
  private readonly leastNeed: Need;
  /**
   * Ports no unit may bind as its host port, anywhere: a unit there would take the platform's own
   * traffic (or crash-loop while its probe reaches the platform's listener and passes).
   */
  private readonly platformPorts: ReadonlySet<number>;

  constructor(machines: PlannerMachine[], current: PlacedUnit[], rules: ServiceRules[]) {
    this.machines = machines.map((machine, index) => ({
      machine,
      index,
      load: 0,
      memoryMB: 0,
      milliCpus: 0,
      memoryLimit: machine.memoryMB,
      milliCpuLimit: machine.cpus === undefined ? undefined : Math.round(machine.cpus * 1000),
      rank: 0,
      services: new Map(),
    }));
    this.byId = new Map(this.machines.map((state) => [state.machine.id, state]));
    this.platformPorts = new Set([...PLATFORM_PORTS, ...machines.flatMap((machine) => machine.platformPorts ?? [])]);
    const known = new Map(rules.map((rule) => [rule.service, rule]));
    for (const unit of current) if (!known.has(unit.service)) known.set(unit.service, { service: unit.service, conflictsWith: '', hostPorts: [] });
    this.conflicts = new ConflictIndex(known.values());
    const needs = [...known.values()].map(needOf);
    this.leastNeed = needs.reduce((least, n) => ({ memoryMB: Math.min(least.memoryMB, n.memoryMB), milliCpus: Math.min(least.milliCpus, n.milliCpus) }), { memoryMB: Infinity, milliCpus: Infinity });
    for (const unit of current) {
      const state = this.byId.get(unit.machine);
      if (state) this.occupy(state, unit.service, needOf(unit));
    }
    for (const state of this.machines) if (!state.machine.unavailable) this.heap.push({ load: state.rank, index: state.index });
  }

  /** Places one unit for each of `instances` of `service`, preferring each instance's machine. */
  place(service: string, instances: number[], preferred?: ReadonlyMap<number, string>): PlaceResult {
    const result: PlaceResult = { place: [], unplaced: [] };
    const rules = this.conflicts.rulesOf(service);
    const need = needOf(rules);
    const platformPort = rules.hostPorts.find((port) => this.platformPorts.has(port));
    if (platformPort !== undefined) {
      const reason = `${service} asks for host port ${platformPort}, which the platform listens on; no unit may bind it`;
      return { place: [], unplaced: instances.map((instance) => ({ instance, reason })) };
    }
    for (const instance of instances) {
      const wanted = preferred?.get(instance);
      const sticky = wanted === undefined ? undefined : this.byId.get(wanted);
      if (wanted !== undefined && rules.pinned) {
        // Its volumes are on that machine: there, or nowhere.
        const refusal = sticky ? this.refusal(sticky, service, need) : 'is lost';
        if (refusal) {
          result.unplaced.push({ instance, reason: `${service}-${instance} keeps its volumes on ${wanted}, which ${refusal}; it is not moved (volumeMove: allowed moves it)` });
          continue;
        }
      }
      const chosen = sticky && !this.refusal(sticky, service, need) ? sticky : rules.placement === 'binpack' ? this.fullestFor(service, need) : this.leastLoadedFor(service, need);
      if (!chosen) {
        result.unplaced.push({ instance, reason: this.explain(service, need, instances.length - result.place.length) });
        continue;
      }
      this.occupy(chosen, service, need);
      this.heap.push({ load: chosen.rank, index: chosen.index });
      result.place.push({ instance, machine: chosen.machine.id });
    }
    return result;
  }

  /**
   * Whether `machine` may take one more unit of `service`, by the same rules `place` follows;
   * when it may, the unit is counted there; else why not ("is full"). The plan applier's check (plan-check.ts).
   */
  admit(service: string, machine: string): string | undefined {
    const state = this.byId.get(machine);
    if (!state) return 'is not registered';
    const need = needOf(this.conflicts.rulesOf(service));
    const refusal = this.refusal(state, service, need);
    if (refusal) return refusal;
    this.occupy(state, service, need);
    this.heap.push({ load: state.rank, index: state.index });
    return undefined;
  }

  /** Why the machine cannot take a unit of `service`, or undefined when it can. */
  private refusal(state: MachineState, service: string, need: Need): string | undefined {
    if (state.machine.unavailable) return state.machine.unavailable;
    if (state.load >= state.machine.capacity) return 'is full';
    const short = this.shortfall(state, need);
    if (short) return short;
    if (!this.blocked.get(service)?.has(state.index)) return undefined;
    const conflicting = this.conflicts.conflictsOf(service);
    const clash = [...state.services.keys()].find((other) => conflicting.has(other));
    return `runs ${clash}, which conflicts`;
  }

  private fits(state: MachineState, need: Need): boolean {
    return (
      (state.memoryLimit === undefined || state.memoryMB + need.memoryMB <= state.memoryLimit) &&
      (state.milliCpuLimit === undefined || state.milliCpus + need.milliCpus <= state.milliCpuLimit)
    );
  }

  private shortfall(state: MachineState, need: Need): string | undefined {
    if (this.freeMemory(state) < need.memoryMB) return `has ${this.freeMemory(state)} MB free`;
    if (this.freeMilliCpus(state) < need.milliCpus) return `has ${formatCpus(this.freeMilliCpus(state))} free`;
    return undefined;
  }

  private freeMemory(state: MachineState): number {
    return state.memoryLimit === undefined ? Infinity : state.memoryLimit - state.memoryMB;
  }

  private freeMilliCpus(state: MachineState): number {
    return state.milliCpuLimit === undefined ? Infinity : state.milliCpuLimit - state.milliCpus;
  }

  /** The least a unit needs in this plan: of any known service, and of the one being placed (it may be unknown). */
  private leastWith(need: Need): Need {
    return { memoryMB: Math.min(this.leastNeed.memoryMB, need.memoryMB), milliCpus: Math.min(this.leastNeed.milliCpus, need.milliCpus) };
  }

  private leastLoadedFor(service: string, need: Need): MachineState | undefined {
    const setAside: MachineState[] = [];
    const blocked = this.blocked.get(service);
    const least = this.leastWith(need);
    let chosen: MachineState | undefined;
    for (let entry = this.heap.pop(); entry; entry = this.heap.pop()) {
      const state = this.machines[entry.index]!;
      if (entry.load !== state.rank) continue; // stale: a newer entry for this machine is in the heap
      if (state.load >= state.machine.capacity || !this.fits(state, least)) continue; // full for good in this plan
      if (blocked?.has(state.index) || !this.fits(state, need)) {
        setAside.push(state);
        continue;
      }
      chosen = state;
      break;
    }
    for (const state of setAside) this.heap.push({ load: state.rank, index: state.index });
    return chosen;
  }

  /**
   * Binpack: the feasible machine already most used (its rank), so one machine fills before the next. A scan of every machine: binpack is for the
   * small clusters that want few machines busy, not for the million-unit plan.
   */
  private fullestFor(service: string, need: Need): MachineState | undefined {
    let chosen: MachineState | undefined;
    let best = -1;
    for (const state of this.machines) {
      if (state.machine.unavailable || state.load >= state.machine.capacity || !this.fits(state, need) || this.blocked.get(service)?.has(state.index)) continue;
      if (state.rank > best) {
        best = state.rank;
        chosen = state;
      }
    }
    return chosen;
  }

  private occupy(state: MachineState, service: string, need: Need): void {
    state.load++;
    state.memoryMB += need.memoryMB;
    state.milliCpus += need.milliCpus;
    state.rank = Math.max(
      state.machine.capacity > 0 ? state.load / state.machine.capacity : Infinity,
      state.memoryLimit ? state.memoryMB / state.memoryLimit : 0,
      state.milliCpuLimit ? state.milliCpus / state.milliCpuLimit : 0,
    );
    state.services.set(service, (state.services.get(service) ?? 0) + 1);
    // Every service that conflicts with this one is now blocked on this machine.
    for (const other of this.conflicts.conflictsOf(service)) {
      let machines = this.blocked.get(other);
      if (!machines) this.blocked.set(other, (machines = new Map()));
      machines.set(state.index, (machines.get(state.index) ?? 0) + 1);
    }
  }

  /** When no machine that can run units has room for one unit's memory or CPUs: which, and the best there is. */
  private shortOf(service: string, need: Need): string | undefined {
    const open = this.machines.filter((state) => !state.machine.unavailable);
    if (open.length === 0) return undefined;
    const most = (free: (state: MachineState) => number) => open.reduce((best, state) => (free(state) > free(best) ? state : best));
    const roomiest = most((state) => this.freeMemory(state));
    if (need.memoryMB > 0 && this.freeMemory(roomiest) < need.memoryMB) {
      return `${service} needs ${need.memoryMB} MB; the most free on any machine is ${this.freeMemory(roomiest)} MB (${roomiest.machine.id})`;
    }
    const idlest = most((state) => this.freeMilliCpus(state));
    if (need.milliCpus > 0 && this.freeMilliCpus(idlest) < need.milliCpus) {
      return `${service} needs ${formatCpus(need.milliCpus)}; the most free on any machine is ${formatCpus(this.freeMilliCpus(idlest))} (${idlest.machine.id})`;
    }
    return undefined;
  }

  private explain(service: string, need: Need, needed: number): string {
    if (this.machines.length === 0) return `${service} needs a machine, and no agent is registered`;
    const short = this.shortOf(service, need);
    if (short) return short;
    const reasons = this.machines.map((state) => `${state.machine.id} ${this.refusal(state, service, need) ?? 'qualifies'}`).join('; ');
    const rules = this.conflicts.rulesOf(service);
    if (this.conflicts.conflictsOf(service).has(service)) {
      // Its units spread one per machine: count the machines that host one or could.
      const hosting = this.machines.filter((state) => state.services.has(service)).length;
      const qualifying = hosting + this.machines.filter((state) => !state.services.has(service) && !this.refusal(state, service, need)).length;
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
