import type { PlannedRoute } from './route-plan.js';
import { backendName, slotName, slotsFor, type BackendConfig } from './haproxy-config.js';

// What HAProxy holds, as the gateway last told it, and the Runtime API commands that take it to a
// new route plan: pure, so convergence can be tested without HAProxy. A unit leaving the plan
// (draining, gone) has its slot set to `drain`: requests in flight and open WebSockets finish,
// no new request goes there; the slot is reused only once no free one is left. A plan that does
// not fit (a new service, more units than slots) needs a reload, which starts from `reloaded`.

export type SlotState = 'free' | 'ready' | 'drain';

export interface Slot {
  state: SlotState;
  address?: string;
  unit?: string;
}

export interface Backend {
  name: string;
  route: string;
  kind: 'service' | 'component';
  slots: Slot[];
}

export interface HaproxyState {
  backends: Map<string, Backend>;
  /** host → backend name, as in the hosts map. */
  hosts: Map<string, string>;
}

export interface Transition {
  next: HaproxyState;
  /** Runtime API commands, in order: everything of the plan the running configuration has room for. */
  commands: string[];
  /** Some of the plan does not fit the running configuration's shape: reload (from `reloaded`) after the commands. */
  reload: boolean;
}

export const emptyState = (): HaproxyState => ({ backends: new Map(), hosts: new Map() });

const cloneState = (state: HaproxyState): HaproxyState => ({
  backends: new Map([...state.backends].map(([name, backend]) => [name, { ...backend, slots: backend.slots.map((slot) => ({ ...slot })) }])),
  hosts: new Map(state.hosts),
});

const splitAddress = (address: string): { host: string; port: string } => {
  const colon = address.lastIndexOf(':');
  return { host: address.slice(0, colon).replace(/^\[(.*)\]$/, '$1'), port: address.slice(colon + 1) };
};

/** The state a configuration written now starts in: draining slots are free (their requests stay with the old worker). */
export function reloaded(state: HaproxyState, plan: readonly PlannedRoute[]): HaproxyState {
  const next = cloneState(state);
  for (const backend of next.backends.values()) {
    for (const slot of backend.slots) if (slot.state === 'drain') Object.assign(slot, { state: 'free', address: undefined, unit: undefined });
  }
  for (const route of plan) {
    const name = backendName(route.name, route.kind);
    if (!next.backends.has(name) && route.targets.length === 0) continue;
    const backend = next.backends.get(name) ?? { name, route: route.name, kind: route.kind, slots: [] };
    next.backends.set(name, backend);
    const wanted = new Map(route.targets.map((target) => [target.address, target.unit]));
    for (const slot of backend.slots) {
      if (slot.state === 'ready' && !wanted.has(slot.address!)) Object.assign(slot, { state: 'free', address: undefined, unit: undefined });
    }
    const placed = new Set(backend.slots.filter((slot) => slot.state === 'ready').map((slot) => slot.address!));
    const size = Math.max(backend.slots.length, slotsFor(route.targets.length));
    while (backend.slots.length < size) backend.slots.push({ state: 'free' });
    for (const [address, unit] of wanted) {
      if (placed.has(address)) continue;
      Object.assign(backend.slots.find((slot) => slot.state === 'free')!, { state: 'ready', address, unit });
    }
  }
  // A backend no route leads to any more is left out of the configuration written now.
  const planned = new Set(plan.map((route) => backendName(route.name, route.kind)));
  for (const name of next.backends.keys()) if (!planned.has(name)) next.backends.delete(name);
  next.hosts = mappedHosts(plan, next);
  return next;
}

/**
 * The hosts map: each planned host to its backend, when that backend is in the configuration and
 * has a unit. The others fall through to the Node data plane behind HAProxy, which answers them
 * as it would alone (503 naming the service); so a service whose backend comes with a reload, or
 * whose units arrive while one runs, is never answered by a backend that lacks them.
 */
const mappedHosts = (plan: readonly PlannedRoute[], state: HaproxyState): Map<string, string> =>
  new Map(
    plan.flatMap((route) => {
      const backend = state.backends.get(backendName(route.name, route.kind));
      if (backend === undefined || !backend.slots.some((slot) => slot.state === 'ready')) return [];
      return route.hosts.map((host) => [host, backend.name] as const);
    }),
  );

/**
 * The commands that take HAProxy from `state` towards `plan`. What does not fit (a new backend,
 * more units than slots) sets `reload`; the rest is applied at once, so a reload for one service
 * does not hold back the others.
 */
export function transition(state: HaproxyState, plan: readonly PlannedRoute[], files: { hostsMap: string; unitsMap: string }): Transition {
  const next = cloneState(state);
  const commands: string[] = [];
  const planned = new Set<string>();
  let reload = false;
  for (const route of plan) {
    const name = backendName(route.name, route.kind);
    planned.add(name);
    const backend = next.backends.get(name);
    // A route without units needs no backend yet (the Node server answers its 503): no reload for it.
    if (backend === undefined) reload ||= route.targets.length > 0;
    else if (!placeTargets(backend, route, commands, files.unitsMap)) reload = true;
  }
  for (const backend of next.backends.values()) {
    if (planned.has(backend.name)) continue;
    for (const [index, slot] of backend.slots.entries()) drain(backend, index, slot, commands);
  }
  const hosts = mappedHosts(plan, next);
  for (const [host, backend] of hosts) {
    const before = next.hosts.get(host);
    if (before === backend) continue;
    commands.push(before === undefined ? `add map ${files.hostsMap} ${host} ${backend}` : `set map ${files.hostsMap} ${host} ${backend}`);
  }
  for (const host of next.hosts.keys()) if (!hosts.has(host)) commands.push(`del map ${files.hostsMap} ${host}`);
  next.hosts = hosts;
  return { next, commands, reload };
}

function drain(backend: Backend, index: number, slot: Slot, commands: string[]): void {
  if (slot.state !== 'ready') return;
  slot.state = 'drain';
  commands.push(`set server ${backend.name}/${slotName(backend.name, index)} state drain`);
}

/** Drains slots whose unit left, readies the new ones; false when they do not fit. */
function placeTargets(backend: Backend, route: PlannedRoute, commands: string[], unitsMap: string): boolean {
  const wanted = new Map(route.targets.map((target) => [target.address, target.unit]));
  for (const [index, slot] of backend.slots.entries()) if (!wanted.has(slot.address ?? '')) drain(backend, index, slot, commands);
  for (const [address, unit] of wanted) {
    const held = backend.slots.findIndex((slot) => slot.address === address && slot.state !== 'free');
    if (held !== -1) {
      readyAgain(backend, held, unit, commands, unitsMap);
      continue;
    }
    // A free slot first; else the draining slot that has drained longest (its in-flight requests keep their connections).
    let index = backend.slots.findIndex((slot) => slot.state === 'free');
    if (index === -1) index = backend.slots.findIndex((slot) => slot.state === 'drain');
    if (index === -1) return false;
    const slot = backend.slots[index]!;
    const server = `${backend.name}/${slotName(backend.name, index)}`;
    const { host, port } = splitAddress(address);
    commands.push(`set server ${server} addr ${host} port ${port}`, `set map ${unitsMap} ${slotName(backend.name, index)} ${unit}`, `set server ${server} state ready`);
    Object.assign(slot, { state: 'ready', address, unit });
  }
  return true;
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
    route: backend.route,
    kind: backend.kind,
    slots: backend.slots.map((slot) => (slot.state === 'ready' ? { address: slot.address!, unit: slot.unit! } : {})),
  }));
