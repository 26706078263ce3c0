import type { FastifyBaseLogger } from 'fastify';
import type { PlannedRoute } from './route-plan.js';
import { Upstreams, type Upstream, type UpstreamOptions } from './upstream.js';
import { ServiceMetrics } from './gateway-metrics.js';
import { HeldRequests } from './held-requests.js';

// The Node data plane's route table: host name → the upstreams taking new requests, applied from
// the route plan (route-watch.ts) each time it changes, so a request costs one Map lookup.

export interface Route {
  readonly name: string;
  readonly kind: 'service' | 'component';
  hosts: string[];
  /** Replaced (never mutated) on rebuild. */
  upstreams: Upstream[];
  /** Round-robin position. */
  cursor: number;
  readonly metrics: ServiceMetrics;
  /** While a handover holds the route (epoch ms it ends): new requests wait in `held`. */
  heldUntil: number | undefined;
  readonly held: HeldRequests;
}

export interface RouteView {
  name: string;
  kind: 'service' | 'component';
  hosts: string[];
  upstreams: { address: string; unit: string; inFlight: number }[];
  /** Requests held by a handover under way (the Node data plane's, where HAProxy sends a held route's requests). */
  held?: number;
}

export interface RouteTableOptions {
  upstream: UpstreamOptions;
  log: FastifyBaseLogger;
}

export class RouteTable {
  private hosts = new Map<string, Route>();
  private readonly routes = new Map<string, Route>();
  private readonly upstreams: Upstreams;

  constructor(private readonly options: RouteTableOptions) {
    this.upstreams = new Upstreams(options.upstream);
  }

  /** The route for a host name (lower case, no port), if any. */
  lookup(host: string): Route | undefined {
    return this.hosts.get(host);
  }

  /** The request counts of the route named `name`, while the table holds it. */
  metricsOf(name: string): ServiceMetrics | undefined {
    return this.routes.get(name)?.metrics;
  }

  /** What the table holds, for GET /routes. */
  view(): RouteView[] {
    return [...this.routes.values()].map((route) => ({
      name: route.name,
      kind: route.kind,
      hosts: route.hosts,
      upstreams: route.upstreams.map(({ address, unit, inFlight }) => ({ address, unit, inFlight })),
      ...(route.heldUntil !== undefined || route.held.size > 0 ? { held: route.held.size } : {}),
    }));
  }

  /** In-flight requests get up to `timeoutMs` to finish. */
  async close(timeoutMs: number): Promise<void> {
    await this.upstreams.close(timeoutMs);
  }

  apply(planned: readonly PlannedRoute[]): void {
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
      route.heldUntil = plan.heldUntil;
      // Held requests go on once the hold is lifted and a unit takes them; without one they wait out their hold.
      if (route.heldUntil === undefined && route.upstreams.length > 0) route.held.release();
      for (const target of plan.targets) addresses.add(target.address);
      for (const host of plan.hosts) hosts.set(host, route);
    }
    for (const [name, route] of this.routes) {
      if (names.has(name)) continue;
      this.routes.delete(name);
      route.held.release();
      route.metrics.removed();
      this.options.log.info({ route: name }, 'route removed');
    }
    this.hosts = hosts;
    this.upstreams.retireExcept(addresses);
  }

  private addRoute(name: string, kind: 'service' | 'component'): Route {
    const metrics = new ServiceMetrics(name);
    const route: Route = { name, kind, hosts: [], upstreams: [], cursor: 0, metrics, heldUntil: undefined, held: new HeldRequests(undefined, (seconds) => metrics.heldFor(seconds)) };
    this.routes.set(name, route);
    route.metrics.routable(0);
    return route;
  }
}
