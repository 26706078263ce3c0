import type { FastifyBaseLogger } from 'fastify';
import type { Store } from '../../../store/store.js';
import type { Assignment, UnitStatus } from '../../../schemas/cluster.js';
import type { Deployment, Release, UnitProgress } from '../../../schemas/release.js';
import { rolloutSettings, unitsWanted, type RolloutSettings } from '../../../schemas/service.js';
import { planRolloutStep, type RolloutStep, type RolloutUnit } from '../../../placement/rollout-step.js';
import { isRunning, slotOf, specHash, unitName } from '../../../units.js';
import { evictedMachines, placedUnit, plannerMachine, serviceRules, type ClusterSnapshot, type ClusterWatch } from '../cluster-snapshot.js';
import { rolloutRecorder, type RolloutRecorder } from '../../../store/records/deployments.js';
import type { Plan, PlanApplier } from './plan-applier.js';

// Runs one deployment: takes a snapshot of the watched cluster, asks the pure rollout step what to
// change, has the plan applier check and commit that in one transaction, and waits for the next change, until the release runs
// everywhere, the deployment fails, or a newer deployment of the service supersedes it. The
// outcome is returned; the runner records it.

export interface RolloutOptions {
  store: Store;
  log: FastifyBaseLogger;
  cluster: ClusterWatch;
  /** False once a newer deployment of the service was accepted: this one stops as superseded. */
  isCurrent: () => boolean;
  /** The leader's one writer of placements: every step of the rollout is committed through it. */
  applier: PlanApplier;
  /** The deployment's previous record, still being written: awaited before this one writes the next. */
  phaseRecorded?: Promise<void>;
}

export type RolloutOutcome = { state: 'succeeded' } | { state: 'superseded'; reason?: string } | { state: 'failed'; reason: string };

/** A new unit that crashed this often has shown it will not start. */
const CRASH_LOOP_RESTARTS = 3;

/**
 * How many plans in a row the applier may refuse before the rollout gives up. Each refusal means
 * another plan was committed first, and the next plan is made from the state that includes it, so
 * a refusal in a row is rare; a long run of them means the cluster changes faster than it can be planned.
 */
const MAX_REFUSALS = 20;

/** The longest a rollout waits without any change before it looks again (for its deadlines). */
const IDLE_WAKE_MS = 1000;

/** Failures no waiting will cure: the deployment fails at once with the agent's reason. */
export const isPermanentFailure = (status: UnitStatus): boolean =>
  status.errorKind === 'image-pull' || status.errorKind === 'engine-unreachable' || status.errorKind === 'refused' || (status.active === 'failed' && status.restarts >= CRASH_LOOP_RESTARTS);

export const releaseSpec = (release: Release): string =>
  specHash({ image: release.image, env: release.config.env, ports: release.config.ports, resources: release.config.resources, volumes: release.config.volumes });

/**
 * Units with volumes are replaced in place, one at a time: the old container stops as the new one
 * starts on the same machine, since two containers writing one data directory (a database's lock
 * file, say) would make the new one fail.
 */
const withVolumes = (settings: RolloutSettings, release: Release): RolloutSettings =>
  release.config.volumes?.length ? { ...settings, maxSurge: 0, maxUnavailable: Math.max(1, settings.maxUnavailable) } : settings;

interface TrackedUnit {
  assignment: Assignment;
  status: UnitStatus | undefined;
  unit: RolloutUnit;
}

export async function rollOut(options: RolloutOptions, release: Release, deployment: Deployment): Promise<RolloutOutcome> {
  const recorder = rolloutRecorder(options.store, deployment, options.phaseRecorded);
  // The outcome the caller records next comes after the last progress, so progress is flushed
  // either way; a progress write that failed earlier is reported only when the rollout itself did
  // not fail (its own error, a lost lead say, is the one the caller acts on).
  let outcome: RolloutOutcome;
  try {
    outcome = await rollOutSteps(options, release, deployment, recorder);
  } catch (error) {
    await recorder.flush().catch(() => undefined);
    throw error;
  }
  await recorder.flush();
  return outcome;
}

async function rollOutSteps(options: RolloutOptions, release: Release, deployment: Deployment, recorder: RolloutRecorder): Promise<RolloutOutcome> {
  const { cluster } = options;
  const settings = withVolumes(rolloutSettings(release.config), release);
  const spec = releaseSpec(release);
  const readySince = new Map<string, number>();
  let lastProgress = Date.now();
  let bestReady = -1;
  // What the record holds: the first step's (no units yet, for a new deployment) is not written again.
  let lastUnits = JSON.stringify(deployment.units);
  let rolling = false;
  let refusals = 0;
  for (;;) {
    const seen = cluster.now();
    if (!options.isCurrent()) return { state: 'superseded' };
    const declaration = cluster.declaration(release.service);
    if (!declaration) return { state: 'superseded', reason: `${release.service} is no longer declared` };
    const decide = (): RolloutDecision => decideStep(cluster.snapshot(), release, deployment, spec, settings, readySince, declaration);
    let decision = decide();
    if (decision.step.complete && !decision.stray) return { state: 'succeeded' };

    let changes = changesOf(decision.plan);
    if (changes > 0) {
      // A step that places units is planned again inside the applier's queue, from the state
      // every plan committed before it is in: plans made side by side from one snapshot would all
      // pick the same least used machine and, though each fits, pile units there.
      const applied = await options.applier.applyPlanned(() => {
        if (decision.plan.place.length > 0) decision = decide();
        return decision.plan;
      });
      changes = changesOf(decision.plan);
      if (!applied.applied) {
        // Another plan was committed first (or the declaration changed): plan again from the newer state.
        if (++refusals > MAX_REFUSALS) return { state: 'failed', reason: `its placement was refused ${refusals} times in a row as the cluster changed: ${applied.reason}` };
        await cluster.changedSince(seen, IDLE_WAKE_MS);
        continue;
      }
      refusals = 0;
      if (changes > 0 && !rolling) {
        rolling = true;
        await recorder.phase('rolling');
      }
      if (applied.revision > 0) await cluster.assignmentsCaughtUp(applied.revision);
    }

    const { step, units } = decision;
    const retired = new Set(step.retire);
    const fresh = units.filter((u) => u.assignment.spec === spec && !retired.has(u.unit));
    const readyCount = fresh.filter((u) => u.unit.ready).length;
    if (readyCount > bestReady || step.retire.length > 0) {
      bestReady = Math.max(bestReady, readyCount);
      lastProgress = Date.now();
    }
    const progress = fresh.map(unitProgress);
    const progressJson = JSON.stringify(progress);
    if (progressJson !== lastUnits) {
      lastUnits = progressJson;
      recorder.progress(progress);
    }

    // A unit on a machine being emptied is replaced, not waited for: its engine may be the one that is gone.
    const broken = fresh.find((u) => !u.unit.evicted && u.status && isPermanentFailure(u.status));
    if (broken) return { state: 'failed', reason: `${broken.assignment.unit} on ${broken.assignment.machine}: ${describeStatus(broken.status!)}` };
    // Units on lost machines (kept for their volumes) will not become ready by waiting.
    if (step.unplaced.length > 0 && changes === 0 && !fresh.some((u) => !u.unit.ready && u.unit.alive)) {
      const first = step.unplaced[0]!;
      const replacing = units.some((u) => u.unit.instance === first.instance && u.unit.alive);
      const hint = replacing && settings.maxUnavailable === 0 ? '; with maxUnavailable 0 a unit is only replaced once its successor runs elsewhere' : '';
      return { state: 'failed', reason: `${first.reason}${hint}` };
    }
    if (Date.now() - lastProgress > settings.progressDeadlineSeconds * 1000) {
      const waiting = fresh.filter((u) => !u.unit.ready).map((u) => `${u.assignment.unit} on ${u.assignment.machine} is ${u.status ? describeStatus(u.status) : 'not reported'}`);
      const detail = waiting.length > 0 ? waiting.join('; ') : step.unplaced.map((u) => u.reason).join('; ') || 'old units still stopping';
      return { state: 'failed', reason: `no progress within ${settings.progressDeadlineSeconds} s: ${detail}` };
    }
    // Written changes come back through the watch; otherwise wake when a unit's minReadySeconds ends.
    if (changes === 0) await cluster.changedSince(seen, untilNextReady(fresh, readySince, settings), release.service);
  }
}

interface RolloutDecision {
  units: TrackedUnit[];
  step: RolloutStep;
  /** Statuses of the service in slots it has no assignment for: old units still stopping. */
  stray: boolean;
  plan: Plan;
}

const changesOf = (plan: Plan): number => plan.retire.length + plan.update.length + plan.place.length;

/** What the rollout does next from `snapshot` (pure but for readySince, which it keeps current). */
function decideStep(
  snapshot: ClusterSnapshot,
  release: Release,
  deployment: Deployment,
  spec: string,
  settings: RolloutSettings,
  readySince: Map<string, number>,
  declaration: { key: string; modRevision: number },
): RolloutDecision {
  const ownRules = serviceRules({ name: release.service, conflictsWith: conflictsOf(snapshot, release.service), config: release.config });
  const units = trackUnits(snapshot, release.service, readySince, settings);
  const step = planRolloutStep({
    service: release.service,
    instances: unitsWanted(release.config),
    spec,
    maxSurge: settings.maxSurge,
    maxUnavailable: settings.maxUnavailable,
    units: units.map((u) => u.unit),
    machines: snapshot.machines.map((machine) => plannerMachine(machine, snapshot.drained, snapshot.announcedPorts)),
    cluster: snapshot.assignments.map(placedUnit),
    rules: [...snapshot.services.filter((s) => s.name !== release.service).map(serviceRules), ownRules],
  });
  const own = new Set(units.map((u) => slotKey(u.assignment)));
  const stray = snapshot.statuses.some((s) => s.service === release.service && !own.has(slotKey(s)));
  const retired = new Set(step.retire);
  const plan: Plan = {
    service: release.service,
    // Only while the declaration seen above still stands: units placed after a delete would be
    // orphans, and a changed declaration means the snapshot is behind.
    declaration: { key: declaration.key, modRevision: declaration.modRevision },
    rules: ownRules,
    retire: units.filter((u) => retired.has(u.unit)).map((u) => u.assignment),
    // Units of the target spec from an earlier release keep running; they just join this release.
    update: units
      .filter((u) => !retired.has(u.unit) && u.assignment.spec === spec && u.assignment.release !== release.version)
      .map((u) => ({ ...u.assignment, release: release.version, deployment: deployment.id })),
    place: step.add.map((placement) => newAssignment(release, deployment, spec, settings, placement.instance, placement.machine)),
  };
  return { units, step, stray, plan };
}

export const slotKey = (unit: { machine: string; unit: string; spec: string }): string => `${unit.machine}/${slotOf(unit)}`;

export const describeStatus = (status: UnitStatus): string => `${status.active}/${status.sub}${status.error ? ` (${status.error})` : ''}${status.restarts ? `, ${status.restarts} restarts` : ''}`;

const conflictsOf = (snapshot: ClusterSnapshot, service: string): string => snapshot.services.find((s) => s.name === service)?.conflictsWith ?? '';

const unitProgress = (u: TrackedUnit): UnitProgress => ({
  unit: u.assignment.unit,
  machine: u.assignment.machine,
  active: u.status?.active ?? 'inactive',
  sub: u.status?.sub ?? 'dead',
  ...(u.status?.error ? { error: u.status.error } : {}),
});

/** The service's assigned slots with their status and what the rollout step needs to know of each. */
function trackUnits(snapshot: ClusterSnapshot, service: string, readySince: Map<string, number>, settings: RolloutSettings): TrackedUnit[] {
  const statusOf = new Map(snapshot.statuses.filter((s) => s.service === service).map((s) => [slotKey(s), s]));
  const alive = new Set(snapshot.machines.map((machine) => machine.id));
  const evicted = evictedMachines(snapshot);
  return snapshot.assignments
    .filter((a) => a.service === service)
    .map((assignment) => {
      const key = slotKey(assignment);
      const status = statusOf.get(key);
      const running = status !== undefined && isRunning(status);
      if (!running) readySince.delete(key);
      else if (!readySince.has(key)) readySince.set(key, Date.now());
      const ready = running && Date.now() - readySince.get(key)! >= settings.minReadySeconds * 1000;
      const unit: RolloutUnit = { instance: assignment.instance, machine: assignment.machine, spec: assignment.spec, running, ready, alive: alive.has(assignment.machine), evicted: evicted.has(assignment.machine) };
      return { assignment, status, unit };
    });
}

/** How long until the first running unit that is not ready yet has held for minReadySeconds. */
function untilNextReady(fresh: TrackedUnit[], readySince: Map<string, number>, settings: RolloutSettings): number {
  const waits = fresh
    .filter((u) => u.unit.running && !u.unit.ready)
    .map((u) => readySince.get(slotKey(u.assignment))! + settings.minReadySeconds * 1000 - Date.now());
  return Math.max(0, Math.min(IDLE_WAKE_MS, ...waits));
}

export function newAssignment(release: Release, deployment: Deployment, spec: string, settings: RolloutSettings, instance: number, machine: string): Assignment {
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
    ...(release.config.resources ? { resources: release.config.resources } : {}),
    ...(release.config.volumes?.length ? { volumes: release.config.volumes } : {}),
    deployment: deployment.id,
    assignedAt: new Date().toISOString(),
  };
}
