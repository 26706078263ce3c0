import type { Assignment, UnitStatus } from '../../../schemas/cluster.js';
import type { Deployment, Release } from '../../../schemas/release.js';
import { rolloutSettings, unitsWanted, type RolloutSettings } from '../../../schemas/service.js';
import { isRunning } from '../../../units.js';
import { holdRequests, releaseRequests } from '../../../store/records/request-holds.js';
import { rolloutRecorder } from '../../../store/records/deployments.js';
import { nextHandover, readyDeadline } from '../../../placement/handover-step.js';
import { serviceRules, type ClusterSnapshot, type ClusterWatch } from '../cluster-snapshot.js';
import { describeStatus, isPermanentFailure, newAssignment, releaseSpec, rollOut, slotKey, type RolloutOptions, type RolloutOutcome } from './rollout.js';

// A handover deploy (`rollout.strategy: handover`): for a single-writer service, whose units must
// never run twice on one volume. Unit by unit: every gateway is asked to hold the service's new
// requests (a request hold, src/store/records/request-holds.ts), the old unit is retired (its agent
// drains it: requests in flight finish), and only once its agent has stopped and removed it is the
// new unit placed on the same machine, on the same volumes. When the new unit runs the hold is lifted
// and the held requests go to it. A new unit that fails, or is not ready in time, is retired and the
// old one placed again; its requests go to it, and the deployment fails (and reverts, with autoRevert).
// Units the release adds or drops have no predecessor: the plain rollout that follows places them.

/** How long a step (the old unit stopping, the old unit back) may take at most, beyond the hold, before the deployment gives up. */
const STEP_LIMIT_MS = 120_000;

interface Handover {
  options: RolloutOptions;
  release: Release;
  deployment: Deployment;
  settings: RolloutSettings;
  spec: string;
}

export async function handOver(options: RolloutOptions, release: Release, deployment: Deployment): Promise<RolloutOutcome> {
  const handover: Handover = { options, release, deployment, settings: rolloutSettings(release.config), spec: releaseSpec(release) };
  // A previous leader may have died mid-handover: its hold is ours to end (or to write again below).
  await releaseRequests(options.store, release.service);
  const recorder = rolloutRecorder(options.store, deployment, options.phaseRecorded);
  let rolling = false;
  for (;;) {
    if (!options.isCurrent()) return { state: 'superseded' };
    const old = nextHandover(serviceAssignments(options.cluster.snapshot(), release.service), unitsWanted(release.config), handover.spec);
    if (old === undefined) break;
    if (!rolling) {
      rolling = true;
      await recorder.phase('rolling');
    }
    const failed = await handOverUnit(handover, old);
    if (failed !== undefined) {
      await recorder.flush();
      return failed;
    }
  }
  // Release fields of units already on the target spec, units added or dropped: the plain rollout.
  return rollOut({ ...options, phaseRecorded: recorder.flush() }, release, deployment);
}

/** Hands one unit over; the failure, or undefined when the new unit runs. */
async function handOverUnit(handover: Handover, old: Assignment): Promise<RolloutOutcome | undefined> {
  const { options, release, deployment, settings } = handover;
  const { store, log, cluster } = options;
  const timeoutMs = settings.handoverTimeoutSeconds * 1000;
  const start = Date.now();
  log.info({ service: release.service, unit: old.unit, machine: old.machine, deployment: deployment.id }, 'handover: holding requests, stopping the old unit');
  await holdRequests(store, {
    service: release.service,
    deployment: deployment.id,
    unit: old.unit,
    since: new Date(start).toISOString(),
    until: new Date(start + timeoutMs).toISOString(),
  });
  const stopped = await place(handover, { retire: [old], place: [] });
  if (stopped !== undefined) return failWithOld(handover, old, stopped);
  if (!(await waitFor(cluster, (snapshot) => !statusOf(snapshot, old), start + STEP_LIMIT_MS))) {
    return failWithOld(handover, old, `${old.unit} on ${old.machine} did not stop within ${STEP_LIMIT_MS / 1000} s`);
  }
  const successor = newAssignment(release, deployment, handover.spec, settings, old.instance, old.machine);
  const placed = await place(handover, { retire: [], place: [successor] });
  if (placed !== undefined) return failWithOld(handover, old, placed);
  const outcome = await waitFor(
    cluster,
    (snapshot) => {
      const status = statusOf(snapshot, successor);
      if (status && isRunning(status)) return 'running';
      if (status && isPermanentFailure(status)) return `${successor.unit} on ${successor.machine}: ${describeStatus(status)}`;
      return undefined;
    },
    readyDeadline(start, timeoutMs),
  );
  if (outcome === 'running') {
    await releaseRequests(store, release.service);
    log.info({ service: release.service, unit: old.unit, heldMs: Date.now() - start }, 'handover: new unit runs; held requests released to it');
    return undefined;
  }
  const reason = outcome ?? `${successor.unit} on ${successor.machine} was not ready within the handover's ${settings.handoverTimeoutSeconds} s`;
  const removed = await place(handover, { retire: [successor], place: [] });
  const gone = removed === undefined && (await waitFor(cluster, (snapshot) => !statusOf(snapshot, successor), Date.now() + STEP_LIMIT_MS));
  if (!gone) {
    // The old unit is not placed while its successor may still hold the volume: the hold runs out, the deployment fails.
    return { state: 'failed', reason: `handover of ${old.unit}: ${reason}; the new unit could not be stopped (${removed ?? `still there after ${STEP_LIMIT_MS / 1000} s`}), so the old one was not started again` };
  }
  return failWithOld(handover, old, reason);
}

/** The old unit placed again, its held requests released to it once it runs, and the deployment failed with `reason`. */
async function failWithOld(handover: Handover, old: Assignment, reason: string): Promise<RolloutOutcome> {
  const { options, release } = handover;
  options.log.warn({ service: release.service, unit: old.unit, reason }, 'handover failed: starting the old unit again');
  const back = await place(handover, { retire: [], place: [old] });
  if (back === undefined) await waitFor(options.cluster, (snapshot) => isRunning(statusOf(snapshot, old) ?? { active: 'inactive', sub: 'dead' }), Date.now() + STEP_LIMIT_MS);
  await releaseRequests(options.store, release.service);
  return { state: 'failed', reason: `handover of ${old.unit}: ${reason}${back === undefined ? '; the old unit was started again' : `; the old unit could not be placed again: ${back}`}` };
}

/** Commits a change of the service's units through the plan applier; the reason it was refused, if it was. */
async function place(handover: Handover, change: { retire: Assignment[]; place: Assignment[] }): Promise<string | undefined> {
  const { options, release } = handover;
  const declaration = options.cluster.declaration(release.service);
  if (!declaration) return `${release.service} is no longer declared`;
  const snapshot = options.cluster.snapshot();
  const conflictsWith = snapshot.services.find((service) => service.name === release.service)?.conflictsWith ?? '';
  const applied = await options.applier.apply({
    service: release.service,
    declaration: { key: declaration.key, modRevision: declaration.modRevision },
    rules: serviceRules({ name: release.service, conflictsWith, config: release.config }),
    retire: change.retire,
    update: [],
    place: change.place,
  });
  return applied.applied ? undefined : applied.reason;
}

const serviceAssignments = (snapshot: ClusterSnapshot, service: string): Assignment[] => snapshot.assignments.filter((assignment) => assignment.service === service);

/** The agent's status of the assignment's slot, if it reports one. */
const statusOf = (snapshot: ClusterSnapshot, assignment: Assignment): UnitStatus | undefined =>
  snapshot.statuses.find((status) => slotKey(status) === slotKey(assignment));

/** Waits until `check` answers (truthy) on the watched cluster, or `until` (epoch ms) passes: then undefined. */
async function waitFor<T>(cluster: ClusterWatch, check: (snapshot: ClusterSnapshot) => T | undefined | false, until: number): Promise<T | undefined> {
  for (;;) {
    const seen = cluster.now();
    const result = check(cluster.snapshot());
    if (result !== undefined && result !== false) return result;
    const left = until - Date.now();
    if (left <= 0) return undefined;
    await cluster.changedSince(seen, Math.min(left, 1000));
  }
}
