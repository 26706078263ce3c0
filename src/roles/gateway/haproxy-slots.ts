import type { PlannedRoute } from './route-plan.js';
import { poolBackendName, routeLabel, serverAddress, slotName, slotsFor, type BackendConfig } from './haproxy-config.js';

// What HAProxy holds, as the gateway last told it, and the Runtime API commands that take it to a
// new route plan: pure, so convergence can be tested without HAProxy.
//
// Backends are a pool (`b_1`, `b_2`, …) that names no route in the configuration: the routes map
// says which route a backend serves. A new route takes a spare backend through `set map`, so a
// team adding a service never reloads HAProxy under the other services' clients (HAProxy 2.6's
// reload closes their idle keep-alive connections). A unit gets a free slot (`set server … addr`,
// `state ready`); a unit leaving the plan (draining, gone) has its slot set to `drain`: requests in
// flight and open WebSockets finish, no new request goes there. A backend with no slot left grows
// by a dynamic server (`add server`), so more units need no reload either. A route leaving the
// plan drains its slots and returns its backend to the pool, taken again only once no fresh spare
// is left. Only an empty pool needs a reload, which starts from `reloaded` with a pool as large
// again as the routes it serves.

export type SlotState = 'free' | 'ready' | 'drain';

export interface Slot {
  state: SlotState;
  address?: string;
  unit?: string;
}

export interface Backend {
  /** `b_<n>` (poolBackendName). */
  name: string;
  /** The route it serves (routeLabel); undefined for a spare in the pool. */
  route?: string;
  /** What the routes map says: the route it serves or last served (its draining requests' 502/504 name it), `-` if none yet. */
  label: string;
  slots: Slot[];
}

export interface HaproxyState {
  backends: Map<string, Backend>;
  /** host → backend name, as in the hosts map. */
  hosts: Map<string, string>;
}

/** The map files the commands change, and the maxconn a dynamic server is added with. */
export interface RuntimeTargets {
  hostsMap: string;
  unitsMap: string;
  routesMap: string;
  upstreamConnections: number;
}

export interface Transition {
  next: HaproxyState;
  /** Runtime API commands, in order: everything of the plan the running configuration has room for. */
  commands: string[];
  /** The pool has no spare backend for a new route: reload (from `reloaded`) after the commands. */
  reload: boolean;
}

/** Spare backends a configuration keeps at least: new services arriving between reloads. */
export const MIN_SPARE_BACKENDS = 16;

export const emptyState = (): HaproxyState => ({ backends: new Map(), hosts: new Map() });

const cloneState = (state: HaproxyState): HaproxyState => ({
  backends: new Map([...state.backends].map(([name, backend]) => [name, { ...backend, slots: backend.slots.map((slot) => ({ ...slot })) }])),
  hosts: new Map(state.hosts),
});

const splitAddress = (address: string): { host: string; port: string } => {
  const colon = address.lastIndexOf(':');
  return { host: address.slice(0, colon).replace(/^\[(.*)\]$/, '$1'), port: address.slice(colon + 1) };
};

const freeSlot = (): Slot => ({ state: 'free' });

/** The backend serving a route, by its label. */
export const routedBackends = (state: HaproxyState): Map<string, Backend> =>
  new Map([...state.backends.values()].flatMap((backend) => (backend.route === undefined ? [] : [[backend.route, backend] as const])));

/**
 * A spare for a route: the one it left (a service deleted and declared again finds its draining
 * units), else a fresh one (never used since the last reload), else the one released longest ago.
 */
function spare(state: HaproxyState, route?: string): Backend | undefined {
  let fresh: Backend | undefined;
  let released: Backend | undefined;
  for (const backend of state.backends.values()) {
    if (backend.route !== undefined) continue;
    if (backend.label === route) return backend;
    if (backend.slots.every((slot) => slot.state === 'free')) fresh ??= backend;
    else released ??= backend;
  }
  return fresh ?? released;
}

/**
 * Whether `to` gives a backend that served a route (its routes map label) to another route: HAProxy's
 * counters of that backend so far are the old route's (haproxy-traffic-counters.ts reads them first).
 */
export const reassignsBackend = (from: HaproxyState, to: HaproxyState): boolean =>
  [...to.backends.values()].some((backend) => {
    const label = from.backends.get(backend.name)?.label;
    return label !== undefined && label !== '-' && label !== backend.label;
  });

/** The state a configuration written now starts in: draining slots are free (their requests stay with the old worker), the pool refilled. */
export function reloaded(state: HaproxyState, plan: readonly PlannedRoute[]): HaproxyState {
  const next = cloneState(state);
  const planned = new Set(plan.map(routeLabel));
  for (const backend of next.backends.values()) {
    for (const slot of backend.slots) if (slot.state === 'drain') Object.assign(slot, freeSlot(), { address: undefined, unit: undefined });
    if (backend.route !== undefined && !planned.has(backend.route)) backend.route = undefined;
    if (backend.route === undefined) Object.assign(backend, { label: '-', slots: Array.from({ length: slotsFor(0) }, freeSlot) });
  }
  const routed = routedBackends(next);
  for (const route of plan) {
    if (!routed.has(routeLabel(route)) && route.targets.length === 0) continue;
    const backend = routed.get(routeLabel(route)) ?? spare(next) ?? addBackend(next);
    Object.assign(backend, { route: routeLabel(route), label: routeLabel(route) });
    const wanted = new Map(route.targets.map((target) => [target.address, target.unit]));
    for (const slot of backend.slots) {
      if (slot.state === 'ready' && !wanted.has(slot.address!)) Object.assign(slot, { state: 'free', address: undefined, unit: undefined });
    }
    const placed = new Set(backend.slots.filter((slot) => slot.state === 'ready').map((slot) => slot.address!));
    const size = Math.max(backend.slots.length, slotsFor(route.targets.length));
    while (backend.slots.length < size) backend.slots.push(freeSlot());
    for (const [address, unit] of wanted) {
      if (placed.has(address)) continue;
      Object.assign(backend.slots.find((slot) => slot.state === 'free')!, { state: 'ready', address, unit });
    }
  }
  // As many spares as routes served (at least MIN_SPARE_BACKENDS): the pool runs dry again only after as many new services.
  const serving = [...next.backends.values()].filter((backend) => backend.route !== undefined).length;
  let spares = next.backends.size - serving;
  while (spares < Math.max(MIN_SPARE_BACKENDS, serving)) {
    addBackend(next);
    spares += 1;
  }
  next.hosts = mappedHosts(plan, next);
  return next;
}

function addBackend(state: HaproxyState): Backend {
  let index = state.backends.size + 1;
  while (state.backends.has(poolBackendName(index))) index += 1;
  const backend: Backend = { name: poolBackendName(index), label: '-', slots: Array.from({ length: slotsFor(0) }, freeSlot) };
  state.backends.set(backend.name, backend);
  return backend;
}

/**
 * The hosts map: each planned host to its backend, when the route has one with a unit. The others
 * fall through to the Node data plane behind HAProxy, which answers them as it would alone (503
 * naming the service); so a route whose backend comes with a reload is never answered by a backend
 * that lacks its units. A route held for a handover falls through the same way: HAProxy's requests
 * in flight on the old unit finish there, new ones wait in the Node data plane until the hold ends.
 */
function mappedHosts(plan: readonly PlannedRoute[], state: HaproxyState): Map<string, string> {
  const routed = routedBackends(state);
  return new Map(
    plan.flatMap((route) => {
      const backend = routed.get(routeLabel(route));
      // A held route's hosts go to the Node data plane behind HAProxy, which holds its requests (held-requests.ts).
      if (backend === undefined || route.heldUntil !== undefined || !backend.slots.some((slot) => slot.state === 'ready')) return [];
      return route.hosts.map((host) => [host, backend.name] as const);
    }),
  );
}

/**
 * The commands that take HAProxy from `state` towards `plan`. Only a new route finding the pool
 * empty sets `reload`; the rest is applied at once, so a reload for one route does not hold back
 * the others.
 */
export function transition(state: HaproxyState, plan: readonly PlannedRoute[], targets: RuntimeTargets): Transition {
  const next = cloneState(state);
  const commands: string[] = [];
  const planned = new Set(plan.map(routeLabel));
  for (const backend of next.backends.values()) {
    if (backend.route === undefined || planned.has(backend.route)) continue;
    for (const [index, slot] of backend.slots.entries()) drain(backend, index, slot, commands);
    // Released: back in the pool, and behind the fresh spares (its requests in flight go on).
    backend.route = undefined;
    next.backends.delete(backend.name);
    next.backends.set(backend.name, backend);
  }
  const routed = routedBackends(next);
  let reload = false;
  for (const route of plan) {
    let backend = routed.get(routeLabel(route));
    // A route without units needs no backend yet (the Node server answers its 503).
    if (backend === undefined && route.targets.length === 0) continue;
    backend ??= take(next, routeLabel(route), commands, targets.routesMap);
    if (backend === undefined) reload = true;
    else placeTargets(backend, route, commands, targets);
  }
  const hosts = mappedHosts(plan, next);
  for (const [host, backend] of hosts) {
    const before = next.hosts.get(host);
    if (before === backend) continue;
    commands.push(before === undefined ? `add map ${targets.hostsMap} ${host} ${backend}` : `set map ${targets.hostsMap} ${host} ${backend}`);
  }
  // Hosts leaving go first: a released backend may be taken by another route in this batch, and
  // HAProxy's threads route requests between the commands, so its old hosts must not lead there.
  commands.unshift(...[...next.hosts.keys()].filter((host) => !hosts.has(host)).map((host) => `del map ${targets.hostsMap} ${host}`));
  next.hosts = hosts;
  return { next, commands, reload };
}

/** A spare backend for a new route, named in the routes map before any host leads there. */
function take(state: HaproxyState, route: string, commands: string[], routesMap: string): Backend | undefined {
  const backend = spare(state, route);
  if (backend === undefined) return undefined;
  backend.route = route;
  if (backend.label !== route) commands.push(`set map ${routesMap} ${backend.name} ${route}`);
  backend.label = route;
  return backend;
}

function drain(backend: Backend, index: number, slot: Slot, commands: string[]): void {
  if (slot.state !== 'ready') return;
  slot.state = 'drain';
  commands.push(`set server ${backend.name}/${slotName(backend.name, index)} state drain`);
}

/** Drains slots whose unit left, readies the new ones, growing the backend by dynamic servers when no slot is left. */
function placeTargets(backend: Backend, route: PlannedRoute, commands: string[], targets: RuntimeTargets): void {
  const wanted = new Map(route.targets.map((target) => [target.address, target.unit]));
  for (const [index, slot] of backend.slots.entries()) if (!wanted.has(slot.address ?? '')) drain(backend, index, slot, commands);
  for (const [address, unit] of wanted) {
    const held = backend.slots.findIndex((slot) => slot.address === address && slot.state !== 'free');
    if (held !== -1) {
      readyAgain(backend, held, unit, commands, targets.unitsMap);
      continue;
    }
    const index = slotFor(backend, wanted.size);
    const name = slotName(backend.name, index);
    const server = `${backend.name}/${name}`;
    if (index === backend.slots.length) {
      // A dynamic server starts in maintenance: named in the units map, then enabled.
      backend.slots.push(freeSlot());
      commands.push(`add server ${server} ${serverAddress(address)} maxconn ${targets.upstreamConnections}`, `add map ${targets.unitsMap} ${name} ${unit}`, `enable server ${server}`);
    } else {
      const { host, port } = splitAddress(address);
      commands.push(`set server ${server} addr ${host} port ${port}`, `set map ${targets.unitsMap} ${name} ${unit}`, `set server ${server} state ready`);
    }
    Object.assign(backend.slots[index]!, { state: 'ready', address, unit });
  }
}

/**
 * A free slot first; then, while the backend is smaller than a reload would make it, a new one
 * (index past the end); then a draining slot (its requests in flight keep their connections); then
 * a new one.
 */
function slotFor(backend: Backend, units: number): number {
  const free = backend.slots.findIndex((slot) => slot.state === 'free');
  if (free !== -1) return free;
  if (backend.slots.length < slotsFor(units)) return backend.slots.length;
  const draining = backend.slots.findIndex((slot) => slot.state === 'drain');
  return draining === -1 ? backend.slots.length : draining;
}

function readyAgain(backend: Backend, index: number, unit: string, commands: string[], unitsMap: string): void {
  const slot = backend.slots[index]!;
  if (slot.unit !== unit) commands.push(`set map ${unitsMap} ${slotName(backend.name, index)} ${unit}`);
  if (slot.state === 'drain') commands.push(`set server ${backend.name}/${slotName(backend.name, index)} state ready`);
  Object.assign(slot, { state: 'ready', unit });
}

/** The configuration's view of the state. */
export const backendConfigs = (state: HaproxyState): BackendConfig[] =>
  [...state.backends.values()].map((backend) => ({
    name: backend.name,
    label: backend.label,
    slots: backend.slots.map((slot) => (slot.state === 'ready' ? { address: slot.address!, unit: slot.unit! } : {})),
  }));
