import type { FastifyBaseLogger } from 'fastify';
import type { Store } from '../../store/store.js';
import { componentPrefix, components as componentNames, lastSegment, servicePrefix, unitStatusRoot, type Component } from '../../store/keys.js';
import { PrefixCache, decodeCached, type CachedValue } from '../../store/prefix-cache.js';
import { onStorePing } from '../../store/store-heartbeat.js';
import { RENEWAL_GRACE_TTLS } from '../../store/leased-keys.js';
import type { Domains } from '../../http/host-name.js';
import { planRoutes, type AnnouncedComponent, type PlannedRoute, type RoutedService, type RoutedUnit } from './route-plan.js';

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

export interface RouteWatchOptions {
  domains: Domains;
  exposeComponents: boolean;
  log: FastifyBaseLogger;
  /** The agents' lease TTL (--announce-ttl): statuses are held for RENEWAL_GRACE_TTLS of them after a store outage. */
  leaseTtlSeconds: number;
}

interface Caches {
  services: PrefixCache;
  units: PrefixCache;
  components: PrefixCache | undefined;
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
  private stopHearingStore: (() => void) | undefined;

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
      const components = options.exposeComponents ? await PrefixCache.start(store, componentPrefix) : undefined;
      if (components) started.push(components);
      const watch = new RouteWatch({ services, units, components }, options);
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

  async close(): Promise<void> {
    this.stopHearingStore?.();
    clearTimeout(this.graceTimer);
    await Promise.all([this.caches.services.close(), this.caches.units.close(), this.caches.components?.close()]);
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

  private rebuild(): void {
    try {
      const units = this.unitsToRoute();
      this.current = planRoutes(
        decodeAll<RoutedService>(this.caches.services),
        decodeEntries<RoutedUnit>(units),
        this.caches.components ? announced(this.caches.components) : [],
        this.options.domains,
      );
      this.routedUnits = units;
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
