import type { Component } from '../../store/keys.js';
import { componentHosts, type Domains } from '../../http/host-name.js';
import type { UnitActiveState, UnitSubState } from '../../schemas/cluster.js';
import { isRunning } from '../../schemas/states.js';
import { isLoopback } from '../../auth/caller.js';

// Which host names lead where: a pure function of the declarations, the unit statuses and the
// component announcements, so the rules can be read and tested without a store.

/** The declaration fields routing reads. */
export interface RoutedService {
  name: string;
  loadBalanced: boolean;
  publicFacing: boolean;
}

/** The unit status fields routing reads (values, never keys: the key layout is not routing's business). */
export interface RoutedUnit {
  unit: string;
  service: string;
  active: UnitActiveState;
  sub: UnitSubState;
  address?: string | undefined;
}

export interface AnnouncedComponent {
  component: Component;
  address: string;
}

export interface RouteTarget {
  address: string;
  /** The unit (or component) answering at the address, for logs, metrics and /routes. */
  unit: string;
}

export interface PlannedRoute {
  /** Service name, or component name for a platform component. */
  name: string;
  kind: 'service' | 'component';
  hosts: string[];
  /** Where requests may go now, in a stable order (round robin follows it). */
  targets: RouteTarget[];
  /**
   * A handover is under way (docs/deploys.md): new requests are held, not sent, until the plan
   * lifts the hold or this time (epoch ms) passes. Absent when the route is not held.
   */
  heldUntil?: number;
}

/**
 * Where the platform listens on this machine. A unit announced there is no unit: it is the gateway
 * (or another role) answering itself, which loops each request back in until the gateway's
 * connections run out. That happened when an agent restarted with another --network reported an
 * old bridge container at its label port 8080, the gateway's own.
 */
export interface PlatformEndpoints {
  /** This machine's names and addresses (loopback is always one), lower case, IPv6 in brackets. */
  hosts: ReadonlySet<string>;
  /** The gateway's listeners, PLATFORM_PORTS and the announced roles' ports. */
  ports: ReadonlySet<number>;
}

const unspecified = new Set(['0.0.0.0', '[::]', '::', '']);

/** Whether `address` (host:port) is where the platform listens on this machine. */
export function isPlatformEndpoint(address: string, platform: PlatformEndpoints): boolean {
  const colon = address.lastIndexOf(':');
  if (!platform.ports.has(Number(address.slice(colon + 1)))) return false;
  const host = address.slice(0, colon).toLowerCase();
  return isLoopback(host) || unspecified.has(host) || platform.hosts.has(host);
}

/** The routable units whose address is where the platform listens: left out of every route. */
export const selfLoops = (units: readonly RoutedUnit[], platform: PlatformEndpoints): RoutedUnit[] =>
  units.filter((unit) => isRoutable(unit) && isPlatformEndpoint(unit.address!, platform));

/**
 * A unit takes new requests only while it runs and is not draining: the agent marks a unit it is
 * about to stop `deactivating/running`, which is "not routable" here.
 */
export const isRoutable = (unit: RoutedUnit): boolean => isRunning(unit) && !!unit.address;

export function planRoutes(
  services: readonly RoutedService[],
  units: readonly RoutedUnit[],
  components: readonly AnnouncedComponent[],
  domains: Domains,
  platform: PlatformEndpoints = { hosts: new Set(), ports: new Set() },
  /** Services whose requests are held, with when each hold ends (epoch ms). */
  holds: ReadonlyMap<string, number> = new Map(),
): PlannedRoute[] {
  const targets = routableTargets(units.filter((unit) => !unit.address || !isPlatformEndpoint(unit.address, platform)));
  const routes: PlannedRoute[] = [];
  for (const service of services) {
    if (!service.loadBalanced) continue;
    const hosts = [`${service.name}.${domains.internalDomain}`];
    if (service.publicFacing) hosts.push(`${service.name}.${domains.domain}`);
    const heldUntil = holds.get(service.name);
    routes.push({ name: service.name, kind: 'service', hosts, targets: targets.get(service.name) ?? [], ...(heldUntil !== undefined ? { heldUntil } : {}) });
  }
  for (const { component, address } of components) {
    const hosts = componentHosts(component, domains);
    if (hosts.length > 0) routes.push({ name: component, kind: 'component', hosts, targets: [{ address, unit: component }] });
  }
  return routes;
}

/** Routable addresses per service, ordered by unit name then address; one target per address. */
function routableTargets(units: readonly RoutedUnit[]): Map<string, RouteTarget[]> {
  const byService = new Map<string, RouteTarget[]>();
  const seen = new Set<string>();
  const sorted = units.filter(isRoutable).sort((a, b) => compareUnits(a.unit, b.unit) || (a.address! < b.address! ? -1 : 1));
  for (const unit of sorted) {
    if (seen.has(unit.address!)) continue;
    seen.add(unit.address!);
    const list = byService.get(unit.service) ?? [];
    list.push({ address: unit.address!, unit: unit.unit });
    byService.set(unit.service, list);
  }
  return byService;
}

/** web-2.service before web-10.service. */
const compareUnits = (a: string, b: string): number => a.localeCompare(b, 'en', { numeric: true });
