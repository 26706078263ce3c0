import type { ClusterState } from './cluster-state.js';
import type { ClusterUnit, Machine } from '../schemas/cluster.js';
import { isRunning } from '../schemas/states.js';
import { table } from './table.js';

// `platform status`: the cluster on one screen, from the same live copy the dashboard keeps
// (a snapshot of GET /events): services with their units running of wanted (and placed, when that differs), the release they run
// and how their last deployment went; machines with their units, drained or lost; the newest
// deployments. Pure: the command prints it once, or redraws it on every change (`--watch`).

const NEWEST_DEPLOYMENTS = 8;

/** Instances of the service that have a unit it wants (placed), and those of them that run. */
export function unitCounts(units: ClusterUnit[]): { running: number; placed: number } {
  const placed = new Set(units.filter((unit) => unit.desired).map((unit) => unit.instance));
  const running = new Set(units.filter((unit) => unit.desired && isRunning(unit)).map((unit) => unit.instance));
  return { running: running.size, placed: placed.size };
}

/**
 * The RUNNING column: units running of those the deployed release wants (`97/1000`), and how many
 * are placed when that differs (`97/1000 (placed 97)`: no machine had room for the rest). A
 * deployment recorded before it named its wanted count is measured against the placed units.
 */
export function runningColumn(counts: { running: number; placed: number }, wanted: number | undefined): string {
  const of = wanted ?? counts.placed;
  return counts.placed === of ? `${counts.running}/${of}` : `${counts.running}/${of} (placed ${counts.placed})`;
}

function servicesTable(state: ClusterState): string {
  const names = [...state.services.keys()].sort();
  if (names.length === 0) return 'no services (create one: platform create NAME --image REPOSITORY)\n';
  const rows = names.map((name) => {
    const units = state.unitsOf(name);
    const releases = [...new Set(units.filter((unit) => unit.desired && isRunning(unit)).map((unit) => unit.release))].sort((a, b) => a - b);
    const last = state.latestDeployment(name);
    const deployment = last ? `${last.state} (${last.trigger}, v${last.release})` : 'never deployed';
    return [name, runningColumn(unitCounts(units), state.wantedUnits(name)), releases.length ? releases.map((v) => `v${v}`).join(' → ') : '-', deployment, last?.reason ?? ''];
  });
  return table(['SERVICE', 'RUNNING', 'RELEASE', 'LAST DEPLOYMENT', 'REASON'], rows);
}

/** A machine's DOCKER column: the engine's version, or since when it has had none and why. */
export const engineColumn = (docker: Machine['docker']): string =>
  docker.reachable
    ? (docker.version ?? 'ok')
    : `no engine${docker.unreachableSince ? ` since ${docker.unreachableSince}` : ''}: ${docker.error ?? 'unreachable'}`;

function machinesTable(state: ClusterState): string {
  // A machine with units but no registration is lost: its agent's lease ran out.
  const ids = [...new Set([...state.machines.keys(), ...state.machinesWithUnits()])].sort();
  if (ids.length === 0) return 'no machines (start an agent: platform serve --role agent)\n';
  const rows = ids.map((id) => {
    const machine = state.machines.get(id);
    const units = state.unitsOn(id);
    const condition = !machine ? 'lost' : machine.drain ? `draining since ${machine.drain.since}${machine.drain.reason ? ` (${machine.drain.reason})` : ''}` : 'ready';
    const docker = machine ? engineColumn(machine.docker) : '-';
    return [id, machine?.address ?? '-', `${units.filter(isRunning).length}/${units.length}`, condition, docker];
  });
  return table(['MACHINE', 'ADDRESS', 'UNITS RUNNING', 'STATE', 'DOCKER'], rows);
}

function deploymentsTable(state: ClusterState): string {
  const newest = [...state.deployments.values()].sort((a, b) => (a.id < b.id ? 1 : -1)).slice(0, NEWEST_DEPLOYMENTS);
  if (newest.length === 0) return 'no deployments yet\n';
  return table(
    ['DEPLOYMENT', 'SERVICE', 'RELEASE', 'STATE', 'TRIGGER', 'CREATED', 'REASON'],
    newest.map((d) => [d.id, d.service, `v${d.release}`, d.state, d.trigger, d.createdAt, d.reason ?? '']),
  );
}

export function statusScreen(state: ClusterState): string {
  return [servicesTable(state), machinesTable(state), deploymentsTable(state)].join('\n');
}
