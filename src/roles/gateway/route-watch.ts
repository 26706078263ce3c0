import type { FastifyBaseLogger } from 'fastify';
import type { Store } from '../../store/store.js';
import { componentPrefix, components as componentNames, lastSegment, servicePrefix, unitStatusRoot, type Component } from '../../store/keys.js';
import { PrefixCache, decodeCached, type CachedValue } from '../../store/prefix-cache.js';
import type { Domains } from './host-name.js';
import { planRoutes, type AnnouncedComponent, type PlannedRoute, type RoutedService, type RoutedUnit } from './route-plan.js';

// The one route plan: watched in-memory copies of the declarations, the unit statuses and
// (optionally) the component announcements, turned into a plan by the pure `planRoutes` as soon
// as any of them changes, and handed to whichever data plane applies it. A unit the agent marks
// draining leaves the plan the moment its status arrives.

export interface RouteWatchOptions {
  domains: Domains;
  exposeComponents: boolean;
  log: FastifyBaseLogger;
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

  private rebuild(): void {
    try {
      this.current = planRoutes(
        decodeAll<RoutedService>(this.caches.services),
        decodeAll<RoutedUnit>(this.caches.units),
        this.caches.components ? announced(this.caches.components) : [],
        this.options.domains,
      );
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
  const values: T[] = [];
  for (const entry of cache.values()) {
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
