import type { FastifyBaseLogger } from 'fastify';
import type { Store } from '../../store/store.js';
import { componentPrefix, components as componentNames, lastSegment, servicePrefix, unitStatusRoot, type Component } from '../../store/keys.js';
import { PrefixCache, decodeCached, type CachedValue } from '../../store/prefix-cache.js';
import type { Domains } from './host-name.js';
import { planRoutes, type AnnouncedComponent, type RoutedService, type RoutedUnit } from './route-plan.js';
import { Upstreams, type Upstream, type UpstreamOptions } from './upstream.js';
import { ServiceMetrics } from './gateway-metrics.js';

// The live route table: host name → the upstreams taking new requests. Built from watched
// in-memory copies of the declarations, the unit statuses and (optionally) the component
// announcements, and rebuilt as soon as any of them changes, so a unit the agent marks draining
// gets no new request from the moment its status arrives.

export interface Route {
  readonly name: string;
  readonly kind: 'service' | 'component';
  hosts: string[];
  /** Replaced (never mutated) on rebuild. */
  upstreams: Upstream[];
  /** Round-robin position. */
  cursor: number;
  readonly metrics: ServiceMetrics;
}

export interface RouteView {
  name: string;
  kind: 'service' | 'component';
  hosts: string[];
  upstreams: { address: string; unit: string; inFlight: number }[];
}

export interface RouteTableOptions {
  domains: Domains;
  exposeComponents: boolean;
  upstream: UpstreamOptions;
  log: FastifyBaseLogger;
}

interface Caches {
  services: PrefixCache;
  units: PrefixCache;
  components: PrefixCache | undefined;
}

export class RouteTable {
  private hosts = new Map<string, Route>();
  private readonly routes = new Map<string, Route>();
  private rebuildQueued = false;
  private readonly upstreams: Upstreams;

  private constructor(
    private readonly caches: Caches,
    private readonly options: RouteTableOptions,
  ) {
    this.upstreams = new Upstreams(options.upstream);
  }

  static async start(store: Store, options: RouteTableOptions): Promise<RouteTable> {
    const started: PrefixCache[] = [];
    try {
      const services = await PrefixCache.start(store, servicePrefix);
      started.push(services);
      const units = await PrefixCache.start(store, unitStatusRoot);
      started.push(units);
      const components = options.exposeComponents ? await PrefixCache.start(store, componentPrefix) : undefined;
      if (components) started.push(components);
      const table = new RouteTable({ services, units, components }, options);
      table.rebuild();
      for (const cache of started) cache.onChange(() => table.queueRebuild());
      return table;
    } catch (error) {
      await Promise.all(started.map((cache) => cache.close()));
      throw error;
    }
  }

  /** The route for a host name (lower case, no port), if any. */
  lookup(host: string): Route | undefined {
    return this.hosts.get(host);
  }

  /** What the table holds, for GET /routes. */
  view(): RouteView[] {
    return [...this.routes.values()].map((route) => ({
      name: route.name,
      kind: route.kind,
      hosts: route.hosts,
      upstreams: route.upstreams.map(({ address, unit, inFlight }) => ({ address, unit, inFlight })),
    }));
  }

  /** Stops following the store; in-flight requests get up to `timeoutMs` to finish. */
  async close(timeoutMs: number): Promise<void> {
    await Promise.all([this.caches.services.close(), this.caches.units.close(), this.caches.components?.close()]);
    await this.upstreams.close(timeoutMs);
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
    let planned;
    try {
      planned = planRoutes(
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
    const hosts = new Map<string, Route>();
    const addresses = new Set<string>();
    const names = new Set<string>();
    for (const plan of planned) {
      names.add(plan.name);
      const route = this.routes.get(plan.name) ?? this.addRoute(plan.name, plan.kind);
      route.hosts = plan.hosts;
      const before = route.upstreams.map((upstream) => upstream.address).join(' ');
      route.upstreams = plan.targets.map((target) => this.upstreams.acquire(target.address, target.unit));
      const after = plan.targets.map((target) => target.address).join(' ');
      if (before !== after) {
        this.options.log.info({ route: plan.name, upstreams: plan.targets.map((target) => `${target.unit}@${target.address}`) }, 'route changed');
        route.metrics.routable(route.upstreams.length);
      }
      for (const target of plan.targets) addresses.add(target.address);
      for (const host of plan.hosts) hosts.set(host, route);
    }
    for (const [name, route] of this.routes) {
      if (names.has(name)) continue;
      this.routes.delete(name);
      route.metrics.removed();
      this.options.log.info({ route: name }, 'route removed');
    }
    this.hosts = hosts;
    this.upstreams.retireExcept(addresses);
  }

  private addRoute(name: string, kind: 'service' | 'component'): Route {
    const route: Route = { name, kind, hosts: [], upstreams: [], cursor: 0, metrics: new ServiceMetrics(name) };
    this.routes.set(name, route);
    route.metrics.routable(0);
    return route;
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
