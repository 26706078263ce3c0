import type { Store, WatchEvent } from '../../store/store.js';
import { assignmentRoot, componentPrefix, machineAwayPrefix, machineDrainPrefix, machinePrefix, servicePrefix, unitStatusRoot } from '../../store/keys.js';
import { PrefixCache, decodeCached, type CachedValue } from '../../store/prefix-cache.js';
import { cachedDeclaration } from '../../store/records/services.js';
import type { Assignment, Machine, MachineAway, MachineDrain, UnitStatus } from '../../schemas/cluster.js';
import { announcedPorts, keepsUnitsWithVolumes, type Service } from '../../schemas/service.js';
import type { PlacedUnit, PlannerMachine, ServiceRules } from '../../placement/planner.js';
import { placeJob, type JobPlacement } from '../../placement/job-placement.js';
import { defaultEngineGraceSeconds, defaultMachineGraceMs } from '../../config.js';
import { serviceOfUnit } from '../../units.js';

// What the scheduler plans from: every machine, assignment, service declaration, drain and unit
// status, held in memory by store watches (PrefixCache) instead of re-read on a timer. Rollouts,
// healing and stops read a snapshot, act, and then wait for the next change (or a deadline), so
// they react to an agent's report as soon as the watch delivers it.

/** What the scheduler reads before it plans. */
export interface ClusterSnapshot {
  machines: Machine[];
  assignments: Assignment[];
  services: Service[];
  /** Ids of machines being drained. */
  drained: Set<string>;
  /** Ids of machines whose Docker engine has been unreachable for longer than the grace period. */
  engineLost: Set<string>;
  /** Machines not registered whose agent stopped on purpose less than the machine grace ago: expected back. */
  away?: MachineAwayUntil[];
  statuses: UnitStatus[];
  /** Ports of the roles' announced addresses (a gateway on a port of its own): no unit's host port. */
  announcedPorts?: number[];
}

/** A machine away and expected back, and until when its units stay in place (ISO times). */
export interface MachineAwayUntil {
  machine: string;
  since: string;
  until: string;
}

/**
 * The away records of machines not registered whose grace has not ended at `now`. `since` is the
 * agent's clock, compared with the scheduler's: machines keep time (NTP), as for the engine grace.
 */
export function machinesAway(records: readonly MachineAway[], registered: ReadonlySet<string>, graceMs: number, now: number): MachineAwayUntil[] {
  return records
    .filter((record) => !registered.has(record.machine))
    .map((record) => ({ machine: record.machine, since: record.since, untilMs: Date.parse(record.since) + graceMs }))
    .filter((record) => record.untilMs > now)
    .map(({ machine, since, untilMs }) => ({ machine, since, until: new Date(untilMs).toISOString() }));
}

/**
 * Whether the machine's engine has been gone longer than `graceMs` at `now`. The outage start is
 * the agent's clock, compared with the scheduler's: machines are assumed to keep time (NTP), as
 * token expiry already does.
 */
export const engineLostAt = (machine: Machine, graceMs: number, now: number): boolean =>
  !machine.docker.reachable && machine.docker.unreachableSince !== undefined && now - Date.parse(machine.docker.unreachableSince) >= graceMs;

/** Machines whose units move elsewhere: drained ones and those without an engine past the grace period. */
export const evictedMachines = (snapshot: Pick<ClusterSnapshot, 'drained' | 'engineLost'>): Set<string> => new Set([...snapshot.drained, ...snapshot.engineLost]);

const prefixes = {
  machines: machinePrefix,
  assignments: assignmentRoot,
  services: servicePrefix,
  drains: machineDrainPrefix,
  statuses: unitStatusRoot,
  components: componentPrefix,
  away: machineAwayPrefix,
} as const;
type Part = keyof typeof prefixes;

export class ClusterWatch {
  /** Bumped on every change any watch delivers, and by poke(): waiters compare against it. */
  private generation = 0;
  /** The generation of the last change that concerns every service (a machine, a drain, a declaration, a poke). */
  private everyServiceAt = 0;
  /** Per service, the generation of the last change to one of its assignments or unit statuses. */
  private readonly serviceAt = new Map<string, number>();
  private waiters: { service: string | undefined; wake: () => void }[] = [];

  private constructor(
    private readonly caches: Record<Part, PrefixCache>,
    private readonly engineGraceMs: number,
    private readonly machineGraceMs: number,
  ) {
    for (const [part, cache] of Object.entries(caches) as [Part, PrefixCache][]) {
      if (part === 'assignments' || part === 'statuses') cache.onChange((event) => this.bump(serviceOfSlotKey(event.key)));
      else if (part === 'machines') cache.onChange((event) => this.machineChanged(event));
      else cache.onChange(() => this.bump());
    }
  }

  /** Per machine, its record less what an agent rewrites as its units come and go. */
  private readonly machineShapes = new Map<string, string>();

  /**
   * An agent rewrites its machine record whenever its count of units changes: during a deploy of
   * hundreds of units, that woke every waiting rollout hundreds of times though nothing placement
   * reads (src/placement/) had changed.
   */
  private machineChanged(event: WatchEvent): void {
    if (event.type === 'put' && event.value !== undefined) {
      const shape = machineShape(event.value);
      if (this.machineShapes.get(event.key) === shape) return;
      this.machineShapes.set(event.key, shape);
    } else this.machineShapes.delete(event.key);
    this.bump();
  }

  static async start(store: Store, engineGraceSeconds = defaultEngineGraceSeconds, machineGraceMs = defaultMachineGraceMs): Promise<ClusterWatch> {
    const parts = Object.keys(prefixes) as Part[];
    const caches = await Promise.all(parts.map((part) => PrefixCache.start(store, prefixes[part])));
    return new ClusterWatch(Object.fromEntries(parts.map((part, i) => [part, caches[i]!])) as Record<Part, PrefixCache>, engineGraceSeconds * 1000, machineGraceMs);
  }

  /** Listens to one part's changes (e.g. a machine lease expiring, a service deleted). */
  onChange(part: Part, listener: (event: WatchEvent) => void): void {
    this.caches[part].onChange(listener);
  }

  snapshot(): ClusterSnapshot {
    const machines = this.records<Machine>('machines');
    const now = Date.now();
    return {
      machines,
      engineLost: new Set(machines.filter((machine) => engineLostAt(machine, this.engineGraceMs, now)).map((machine) => machine.id)),
      away: this.machinesAway(machines, now),
      assignments: this.records<Assignment>('assignments'),
      services: this.records<Service>('services'),
      drained: new Set(this.records<MachineDrain>('drains').map((drain) => drain.machine)),
      statuses: this.records<UnitStatus>('statuses'),
      announcedPorts: announcedPorts(this.caches.components.values().map((entry) => entry.value)),
    };
  }

  /** Machines not registered that are away and expected back at `now` (their grace has not ended). */
  machinesAway(machines = this.records<Machine>('machines'), now = Date.now()): MachineAwayUntil[] {
    return machinesAway(this.records<MachineAway>('away'), new Set(machines.map((machine) => machine.id)), this.machineGraceMs, now);
  }

  /** The service's declaration as last seen, with its revision for a transaction's compare. */
  declaration(service: string): CachedValue | undefined {
    return cachedDeclaration(this.caches.services, service);
  }

  statuses(): UnitStatus[] {
    return this.records<UnitStatus>('statuses');
  }

  /** The current generation: pass it to changedSince() to wait for anything newer. */
  now(): number {
    return this.generation;
  }

  /**
   * Resolves once something changed after `since` (at once if it already has), or after
   * `timeoutMs`. With `service`, only what concerns it counts: its own units and statuses, and
   * what concerns every service (machines, drains, declarations, a poke). A rollout waiting for
   * its units woke at every unit change in the cluster: with 200 services rolling, each change
   * planned 200 steps.
   */
  changedSince(since: number, timeoutMs: number, service?: string): Promise<void> {
    const changedAt = service === undefined ? this.generation : Math.max(this.everyServiceAt, this.serviceAt.get(service) ?? 0);
    if (changedAt > since) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, timeoutMs);
      this.waiters.push({
        service,
        wake: () => {
          clearTimeout(timer);
          resolve();
        },
      });
    });
  }

  /** Wakes every waiter: a change that is not in the store, like a newer deployment accepted. */
  poke(): void {
    this.bump();
  }

  /** Resolves once the assignments watch has delivered `revision`, so the next snapshot shows the scheduler's own write. */
  assignmentsCaughtUp(revision: number): Promise<void> {
    return this.caches.assignments.caughtUp(revision);
  }

  async close(): Promise<void> {
    await Promise.all(Object.values(this.caches).map((cache) => cache.close()));
    this.bump();
  }

  private records<T>(part: Part): T[] {
    return this.caches[part].values().map((entry) => decodeCached<T>(entry));
  }

  /** A change of `service`'s units, or (undefined) one that concerns every service. */
  private bump(service?: string): void {
    this.generation += 1;
    if (service === undefined) this.everyServiceAt = this.generation;
    else this.serviceAt.set(service, this.generation);
    const waking: (() => void)[] = [];
    const waiting: typeof this.waiters = [];
    for (const waiter of this.waiters) {
      if (service === undefined || waiter.service === undefined || waiter.service === service) waking.push(waiter.wake);
      else waiting.push(waiter);
    }
    this.waiters = waiting;
    for (const wake of waking) wake();
  }
}

/** A machine record as placement and healing read it: without its count of units and when it was written. */
function machineShape(value: string): string {
  try {
    const { unitCount: _count, updatedAt: _written, ...shape } = JSON.parse(value) as Machine;
    return JSON.stringify(shape);
  } catch {
    return value;
  }
}

/**
 * The service of an assignment's or a unit status's key, which ends in the unit's slot
 * (`<service>-<instance>.service@<spec>`, src/units.ts); undefined for a key of another shape.
 */
export function serviceOfSlotKey(key: string): string | undefined {
  const slot = key.slice(key.lastIndexOf('/') + 1);
  const at = slot.indexOf('@');
  return at < 0 ? undefined : serviceOfUnit(slot.slice(0, at));
}

/** `announced`: ports of the roles' announcements, which count as platform ports on every machine (as PLATFORM_PORTS do). */
export const plannerMachine = (machine: Machine, drained: ReadonlySet<string>, announced: readonly number[] = []): PlannerMachine => ({
  id: machine.id,
  capacity: machine.capacity.units,
  memoryMB: machine.capacity.memoryMB,
  cpus: machine.capacity.cpus,
  platformPorts: [...(machine.platformPorts ?? []), ...announced],
  ...(drained.has(machine.id)
    ? { unavailable: 'is being drained' }
    : machine.docker.reachable
      ? {}
      : { unavailable: `cannot run units: Docker engine unreachable (${machine.docker.error ?? 'no reason given'})` }),
});

export const serviceRules = (service: Pick<Service, 'name' | 'conflictsWith' | 'config'>): ServiceRules => ({
  service: service.name,
  conflictsWith: service.conflictsWith,
  hostPorts: service.config.ports.flatMap((port) => (port.host === undefined ? [] : [port.host])),
  memoryMB: service.config.resources?.memoryMB,
  cpus: service.config.resources?.cpus,
  placement: service.config.placement,
  pinned: keepsUnitsWithVolumes(service.config),
});

/** A unit as placement counts it: where it is and what it reserves there. */
export const placedUnit = (assignment: Assignment): PlacedUnit => ({
  service: assignment.service,
  instance: assignment.instance,
  machine: assignment.machine,
  memoryMB: assignment.resources?.memoryMB,
  cpus: assignment.resources?.cpus,
});

/** Where a job with `rules` may run in the snapshot (src/placement/job-placement.ts); `required`: there or nowhere. */
export const placeJobIn = (snapshot: ClusterSnapshot, rules: ServiceRules, required: string | undefined): JobPlacement =>
  placeJob({
    machines: snapshot.machines.map((machine) => plannerMachine(machine, snapshot.drained, snapshot.announcedPorts)),
    current: snapshot.assignments.map(placedUnit),
    rules: snapshot.services.map(serviceRules),
    job: rules,
    required,
  });
