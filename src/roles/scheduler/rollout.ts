import type { FastifyBaseLogger } from 'fastify';
import type { Operation, Store } from '../../store/store.js';
import { assignmentKey, serviceKey } from '../../store/keys.js';
import type { Assignment, UnitStatus } from '../../schemas/cluster.js';
import type { Deployment, Release } from '../../schemas/release.js';
import { rolloutSettings, type RolloutSettings } from '../../schemas/service.js';
import { planRolloutStep, type RolloutUnit } from '../../placement/rollout-step.js';
import { isRunning, slotOf, specHash, unitName } from '../../units.js';
import { plannerMachine, readClusterSnapshot, readUnitStatuses, serviceRules, type ClusterSnapshot } from './cluster-snapshot.js';
import { updateDeployment } from './deployments.js';
import { appendJournal } from './journal.js';

// Runs one deployment: repeatedly reads the cluster, asks the pure rollout step what to change,
// writes that in one transaction, and watches the units until the release runs everywhere, the
// deployment fails, or a newer deployment of the service supersedes it.

export interface RolloutOptions {
  store: Store;
  log: FastifyBaseLogger;
  /** False once a newer deployment of the service was accepted: this one stops as superseded. */
  isCurrent: () => boolean;
  pollIntervalMs?: number;
}

export type RolloutOutcome = { state: 'succeeded' } | { state: 'superseded'; reason?: string } | { state: 'failed'; reason: string };

/** A new unit that crashed this often has shown it will not start. */
const CRASH_LOOP_RESTARTS = 3;

/** Failures no waiting will cure: the deployment fails at once with the agent's reason. */
const isPermanentFailure = (status: UnitStatus): boolean =>
  /^(image pull failed|Docker engine unreachable)/.test(status.error ?? '') || (status.active === 'failed' && status.restarts >= CRASH_LOOP_RESTARTS);

export const releaseSpec = (release: Release): string =>
  specHash({ image: release.image, env: release.config.env, ports: release.config.ports });

export async function rollOut(options: RolloutOptions, release: Release, deployment: Deployment): Promise<RolloutOutcome> {
  const settings = rolloutSettings(release.config);
  const spec = releaseSpec(release);
  const readySince = new Map<string, number>();
  let lastProgress = Date.now();
  let bestReady = -1;
  let lastUnits = '';
  let rolling = false;
  for (;;) {
    if (!options.isCurrent()) return { state: 'superseded' };
    const [declaration, snapshot, statuses] = await Promise.all([options.store.get(serviceKey(release.service)), readClusterSnapshot(options.store), readUnitStatuses(options.store)]);
    if (!declaration) return { state: 'superseded', reason: `${release.service} is no longer declared` };
    const own = snapshot.assignments.filter((a) => a.service === release.service);
    const statusOf = new Map(statuses.filter((s) => s.service === release.service).map((s) => [`${s.machine}/${slotOf(s)}`, s]));
    const units = own.map((assignment) => rolloutUnit(assignment, statusOf.get(`${assignment.machine}/${slotOf(assignment)}`), snapshot, readySince, settings));

    const step = planRolloutStep({
      service: release.service,
      instances: release.config.numInstances,
      spec,
      maxSurge: settings.maxSurge,
      maxUnavailable: settings.maxUnavailable,
      units: units.map((u) => u.unit),
      machines: snapshot.machines.map((machine) => plannerMachine(machine, snapshot.drained)),
      cluster: snapshot.assignments,
      rules: [...snapshot.services.filter((s) => s.name !== release.service), { name: release.service, conflictsWith: conflictsOf(snapshot, release.service), config: release.config }].map(serviceRules),
    });
    const stray = statuses.some((s) => s.service === release.service && !own.some((a) => a.machine === s.machine && slotOf(a) === slotOf(s)));
    if (step.complete && !stray) return { state: 'succeeded' };

    const retired = new Set(step.retire);
    const operations: Operation[] = [
      ...units.filter((u) => retired.has(u.unit)).map((u): Operation => ({ op: 'delete', key: assignmentKey(u.assignment.machine, slotOf(u.assignment)) })),
      // Units of the target spec from an earlier release keep running; they just join this release.
      ...units
        .filter((u) => !retired.has(u.unit) && u.assignment.spec === spec && u.assignment.release !== release.version)
        .map((u): Operation => put({ ...u.assignment, release: release.version, deployment: deployment.id })),
      ...step.add.map((placement): Operation => put(newAssignment(release, deployment, spec, settings, placement.instance, placement.machine))),
    ];
    if (operations.length > 0) {
      // Only while the declaration read above still stands: units placed after a delete would be orphans.
      const placed = await options.store.txn([{ key: declaration.key, target: 'createRevision', equals: declaration.createRevision }], operations);
      if (!placed.succeeded) continue;
      if (!rolling) {
        rolling = true;
        await updateDeployment(options.store, deployment.id, { state: 'rolling' });
      }
    }

    const fresh = units.filter((u) => u.assignment.spec === spec && !retired.has(u.unit));
    const readyCount = fresh.filter((u) => u.unit.ready).length;
    if (readyCount > bestReady || step.retire.length > 0) {
      bestReady = Math.max(bestReady, readyCount);
      lastProgress = Date.now();
    }
    const progress = fresh.map((u) => ({
      unit: u.assignment.unit,
      machine: u.assignment.machine,
      active: u.status?.active ?? 'inactive',
      sub: u.status?.sub ?? 'dead',
      ...(u.status?.error ? { error: u.status.error } : {}),
    }));
    if (JSON.stringify(progress) !== lastUnits) {
      lastUnits = JSON.stringify(progress);
      await updateDeployment(options.store, deployment.id, { units: progress });
    }

    const broken = fresh.find((u) => u.status && isPermanentFailure(u.status));
    if (broken) return { state: 'failed', reason: `${broken.assignment.unit} on ${broken.assignment.machine}: ${describe(broken.status!)}` };
    if (step.unplaced.length > 0 && operations.length === 0 && !fresh.some((u) => !u.unit.ready)) {
      const hint = settings.maxUnavailable === 0 ? '; with maxUnavailable 0 a unit is only replaced once its successor runs elsewhere' : '';
      return { state: 'failed', reason: `${step.unplaced[0]!.reason}${hint}` };
    }
    if (Date.now() - lastProgress > settings.progressDeadlineSeconds * 1000) {
      const waiting = fresh.filter((u) => !u.unit.ready).map((u) => `${u.assignment.unit} on ${u.assignment.machine} is ${u.status ? describe(u.status) : 'not reported'}`);
      const detail = waiting.length > 0 ? waiting.join('; ') : step.unplaced.map((u) => u.reason).join('; ') || 'old units still stopping';
      return { state: 'failed', reason: `no progress within ${settings.progressDeadlineSeconds} s: ${detail}` };
    }
    await new Promise((resolve) => setTimeout(resolve, options.pollIntervalMs ?? 100));
  }
}

const put = (assignment: Assignment): Operation => ({ op: 'put', key: assignmentKey(assignment.machine, slotOf(assignment)), value: JSON.stringify(assignment) });

const describe = (status: UnitStatus): string => `${status.active}/${status.sub}${status.error ? ` (${status.error})` : ''}${status.restarts ? `, ${status.restarts} restarts` : ''}`;

const conflictsOf = (snapshot: ClusterSnapshot, service: string): string => snapshot.services.find((s) => s.name === service)?.conflictsWith ?? '';

function rolloutUnit(
  assignment: Assignment,
  status: UnitStatus | undefined,
  snapshot: ClusterSnapshot,
  readySince: Map<string, number>,
  settings: RolloutSettings,
): { assignment: Assignment; status: UnitStatus | undefined; unit: RolloutUnit } {
  const key = `${assignment.machine}/${slotOf(assignment)}`;
  const running = status !== undefined && isRunning(status);
  if (!running) readySince.delete(key);
  else if (!readySince.has(key)) readySince.set(key, Date.now());
  const ready = running && Date.now() - (readySince.get(key) ?? Date.now()) >= settings.minReadySeconds * 1000;
  const alive = snapshot.machines.some((machine) => machine.id === assignment.machine);
  const evicted = snapshot.drained.has(assignment.machine);
  return { assignment, status, unit: { instance: assignment.instance, machine: assignment.machine, spec: assignment.spec, running, ready, alive, evicted } };
}

function newAssignment(release: Release, deployment: Deployment, spec: string, settings: RolloutSettings, instance: number, machine: string): Assignment {
  return {
    unit: unitName(release.service, instance),
    service: release.service,
    instance,
    machine,
    release: release.version,
    spec,
    image: release.image,
    ports: release.config.ports,
    env: release.config.env,
    stopGraceSeconds: settings.stopGraceSeconds,
    ...(settings.healthCheck ? { healthCheck: settings.healthCheck } : {}),
    deployment: deployment.id,
    assignedAt: new Date().toISOString(),
  };
}

export async function recordOutcome(store: Store, deployment: Deployment, state: Deployment['state'], reason: string): Promise<void> {
  await updateDeployment(store, deployment.id, { state, finishedAt: new Date().toISOString(), ...(state === 'succeeded' ? {} : { reason }) });
  await appendJournal(store, { service: deployment.service, deployment: deployment.id, kind: `deployment.${state}`, message: `v${deployment.release}: ${reason}` });
}
