import type { FastifyBaseLogger } from 'fastify';
import type { Store } from '../../store/store.js';
import { componentPrefix, components as componentNames, lastSegment, requestHoldRoot, servicePrefix, unitStatusRoot, type Component } from '../../store/keys.js';
import type { RequestHold } from '../../schemas/request-hold.js';
import { PrefixCache, decodeCached, type CachedValue } from '../../store/prefix-cache.js';
import { onStorePing } from '../../store/store-heartbeat.js';
import { RENEWAL_GRACE_TTLS } from '../../store/leased-keys.js';
import type { Domains } from '../../http/host-name.js';
import { PLATFORM_PORTS, announcedPorts } from '../../schemas/service.js';
import { planRoutes, selfLoops, type AnnouncedComponent, type PlannedRoute, type RoutedService, type RoutedUnit } from './route-plan.js';
import { selfLoopsLeftOut } from './gateway-metrics.js';

// The one route plan: watched in-memory copies of the declarations, the unit statuses and
// (optionally) the component announcements, turned into a plan by the pure `planRoutes` as soon
// as any of them changes, and handed to whichever data plane applies it. A unit the agent marks
// draining leaves the plan the moment its status arrives.
//
// Through a store outage the last plan stays. When the store returns, a unit status that vanishes
// with its expired lease (a frozen etcd revokes the leases that expired while it hung the moment
// it wakes) does not take its unit out of the plan: the statuses routed when the store was lost
// are held for the agents' renewal grace (RENEWAL_GRACE_TTLS lease TTLs), until the agent writes
// each again. A unit's status written after that is its own again: its deletion counts at once.
//
// A service with a request hold (a handover under way, written by the leading scheduler) has its
// route marked held until the hold goes or its `until` passes; a timer rebuilds the plan then.
//
// A unit status whose address is where the platform listens on this machine (the gateway's own
// listeners, a platform port, an announced role's port) is left out of the plan, and logged once:
// routing it would send the gateway's requests back into the gateway (route-plan.ts).

export interface RouteWatchOptions {
  domains: Domains;
  exposeComponents: boolean;
  log: FastifyBaseLogger;
  /** The agents' lease TTL (--announce-ttl): statuses are held for RENEWAL_GRACE_TTLS of them after a store outage. */
  leaseTtlSeconds: number;
  /** This machine's names and addresses besides loopback (ownHostNames): a unit announced there on a platform port is a self-loop. */
  machineHosts: ReadonlySet<string>;
}

interface Caches {
  services: PrefixCache;
  units: PrefixCache;
  /** The roles' announcements: their ports are never a unit's, and with --expose-components they are routed. */
  components: PrefixCache;
  /** Handovers under way (src/store/records/request-holds.ts). */
  holds: PrefixCache;
}

export type PlanListener = (plan: readonly PlannedRoute[]) => void;

export class RouteWatch {
  private current: readonly PlannedRoute[] = [];
  private rebuildQueued = false;
  private readonly listeners: PlanListener[] = [];
  /** The unit statuses of the last plan built. */
  private routedUnits: readonly CachedValue[] = [];
  /** From the store's loss until the renewal grace after it returns ends: the statuses routed when it was lost, by key. */
  private held: Map<string, CachedValue> | undefined;
  private storeLost = false;
  private graceTimer: NodeJS.Timeout | undefined;
  /** Rebuilds the plan when the earliest request hold in it runs out. */
  private holdTimer: NodeJS.Timeout | undefined;
  private stopHearingStore: (() => void) | undefined;
  /** The ports the gateway listens on (HTTP, internal, HTTPS, the Node server behind HAProxy). */
  private listenerPorts: readonly number[] = [];
  /** The self-loops left out of the last plan, as `unit@address`: each is logged when it first appears. */
  private leftOut = new Set<string>();

  private constructor(
    private readonly caches: Caches,
    private readonly options: RouteWatchOptions,
  ) {}

  static async start(store: Store, options: RouteWatchOptions): Promise<RouteWatch> {
    const started: PrefixCache[] = [];
    try {
      const services = await PrefixCache.start(store, servicePrefix);
      started.push(services);
      const units = await PrefixCache.start(store, unitStatusRoot);
      started.push(units);
      const components = await PrefixCache.start(store, componentPrefix);
      started.push(components);
      const holds = await PrefixCache.start(store, requestHoldRoot);
      started.push(holds);
      const watch = new RouteWatch({ services, units, components, holds }, options);
      watch.rebuild();
      for (const cache of started) cache.onChange(() => watch.queueRebuild());
      // A status written again is the agent's renewal: from then on its own value, and its deletion, count.
      units.onChange((event) => event.type === 'put' && watch.held?.delete(event.key));
      watch.stopHearingStore = onStorePing(store, (failure) => watch.heardStore(failure));
      return watch;
    } catch (error) {
      await Promise.all(started.map((cache) => cache.close()));
      throw error;
    }
  }

  /** The latest plan. */
  plan(): readonly PlannedRoute[] {
    return this.current;
  }

  /** Calls `listener` with the current plan now and with every new one. */
  follow(listener: PlanListener): void {
    this.listeners.push(listener);
    listener(this.current);
  }

  /** The gateway listens on `ports` (besides those it listened on before): no unit address there is routed. */
  listeningOn(ports: readonly number[]): void {
    this.listenerPorts = [...new Set([...this.listenerPorts, ...ports.filter((port) => port > 0)])];
    this.rebuild();
  }

  async close(): Promise<void> {
    this.stopHearingStore?.();
    clearTimeout(this.graceTimer);
    clearTimeout(this.holdTimer);
    await Promise.all([this.caches.services.close(), this.caches.units.close(), this.caches.components.close(), this.caches.holds.close()]);
  }

  // Watch events arrive in batches: one rebuild per batch, before the next request is handled.
  private queueRebuild(): void {
    if (this.rebuildQueued) return;
    this.rebuildQueued = true;
    queueMicrotask(() => {
      this.rebuildQueued = false;
      this.rebuild();
    });
  }

  private heardStore(failure: unknown): void {
    if (failure !== undefined) {
      if (!this.storeLost) this.held = new Map(this.routedUnits.map((entry) => [entry.key, entry]));
      this.storeLost = true;
      return;
    }
    if (!this.storeLost) return;
    this.storeLost = false;
    clearTimeout(this.graceTimer);
    this.graceTimer = setTimeout(() => {
      this.held = undefined;
      this.queueRebuild();
    }, RENEWAL_GRACE_TTLS * this.options.leaseTtlSeconds * 1000);
    this.graceTimer.unref();
  }

  /** The statuses to route: the store's, and those held through an outage that the store lacks now. */
  private unitsToRoute(): CachedValue[] {
    const current = this.caches.units.values();
    if (!this.held) return current;
    const present = new Set(current.map((entry) => entry.key));
    return [...current, ...[...this.held.values()].filter((entry) => !present.has(entry.key))];
  }

  private platformPorts(components: readonly AnnouncedComponent[]): Set<number> {
    return new Set([...PLATFORM_PORTS, ...this.listenerPorts, ...announcedPorts(components.map((component) => component.address))]);
  }

  /** Logs each self-loop once, when it first appears, and counts those there are now. */
  private noteSelfLoops(units: readonly RoutedUnit[]): void {
    const now = new Set<string>();
    for (const unit of units) {
      const key = `${unit.unit}@${unit.address}`;
      now.add(key);
      if (this.leftOut.has(key)) continue;
      this.options.log.warn(
        { unit: unit.unit, service: unit.service, address: unit.address },
        'unit address left out of the route: the platform listens there on this machine (the gateway would send requests to itself)',
      );
    }
    this.leftOut = now;
    selfLoopsLeftOut(now.size);
  }

  /** The services held now, with when each hold ends; the plan is rebuilt when the first ends. */
  private activeHolds(): Map<string, number> {
    const now = Date.now();
    const holds = new Map<string, number>();
    for (const hold of decodeAll<RequestHold>(this.caches.holds)) {
      const until = Date.parse(hold.until);
      if (until > now) holds.set(hold.service, until);
    }
    clearTimeout(this.holdTimer);
    if (holds.size > 0) {
      this.holdTimer = setTimeout(() => this.rebuild(), Math.min(...holds.values()) - now + 1);
      this.holdTimer.unref();
    }
    return holds;
  }

  private rebuild(): void {
    try {
      const units = this.unitsToRoute();
      const statuses = decodeEntries<RoutedUnit>(units);
      const components = announced(this.caches.components);
      const platform = { hosts: this.options.machineHosts, ports: this.platformPorts(components) };
      this.current = planRoutes(
        decodeAll<RoutedService>(this.caches.services),
        statuses,
        this.options.exposeComponents ? components : [],
        this.options.domains,
        platform,
        this.activeHolds(),
      );
      this.routedUnits = units;
      this.noteSelfLoops(selfLoops(statuses, platform));
    } catch (error) {
      // The store does not answer: keep routing with what was last known rather than nothing.
      this.options.log.warn({ reason: (error as Error).message }, 'route table not rebuilt, keeping the last one');
      return;
    }
    for (const listener of this.listeners) listener(this.current);
  }
}

/** Every JSON value of a cache; a value that does not parse is skipped rather than stopping routing. */
function decodeAll<T>(cache: PrefixCache): T[] {
  return decodeEntries<T>(cache.values());
}

function decodeEntries<T>(entries: readonly CachedValue[]): T[] {
  const values: T[] = [];
  for (const entry of entries) {
    try {
      values.push(decodeCached<T>(entry));
    } catch {
      // not JSON: not a record routing can use
    }
  }
  return values;
}

function announced(cache: PrefixCache): AnnouncedComponent[] {
  return cache
    .values()
    .map((entry: CachedValue) => ({ component: lastSegment(entry.key) as Component, address: entry.value }))
    .filter((entry) => componentNames.includes(entry.component) && /^[^\s/]+:\d+$/.test(entry.address));
}
