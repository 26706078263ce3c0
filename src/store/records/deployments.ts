import type { Operation, Store } from '../store.js';
import { deploymentKey, deploymentPrefix } from '../keys.js';
import { deleteKeys, listRecords, readRecord, updateRecord, type Versioned } from '../json-records.js';
import { decodeCached, PrefixCache } from '../prefix-cache.js';
import { currentTarget, type Deployment, type Release, type ReleaseCommandProgress, type UnitProgress } from '../../schemas/release.js';
import { isFinished } from '../../schemas/states.js';
import { timeOrderedId } from '../ids.js';
import { appendJournal, journalWrite } from './journal.js';
import { outboxWrite } from '../../notifications/outbox.js';
import { deploymentEvent } from '../../notifications/events.js';

// The one owner of deployment records: every write of one (start, progress, outcome, stop,
// deletion beyond the retention limit) and
// the journal line (and outbound notification) that goes with it is here, so a deployment's life reads in one place:
//   pending → pulling → rolling → succeeded | failed | reverted | superseded
// A stop is recorded as a deployment of its own (trigger `stop`), after which the service runs
// nothing. Reads are here too; records are listed newest first (ids sort by creation time).

export const newDeploymentId = timeOrderedId;

export async function getDeployment(store: Store, id: string): Promise<Deployment | undefined> {
  return (await readRecord<Deployment>(store, deploymentKey(id)))?.record;
}

/** Newest first. */
export async function listDeployments(store: Store, service?: string): Promise<Deployment[]> {
  const all = (await listRecords<Deployment>(store, deploymentPrefix)).reverse();
  return service ? all.filter((deployment) => deployment.service === service) : all;
}

export const isInFlight = (deployment: Deployment): boolean => !isFinished(deployment);

/** A watched copy of every deployment record, for serviceDeployments (the leader's reads on a deploy's way). */
export const watchDeployments = (store: Store): Promise<PrefixCache> => PrefixCache.start(store, deploymentPrefix);

/**
 * The service's deployments, newest first, from the watched copy once it holds every deployment
 * record this process wrote through `store`. Listing the prefix read every service's history (50
 * finished deployments each by default) on every deploy: a deploy's store reads grew with the
 * number of other services (issue 29). The leader writes every deployment record, so its copy
 * caught up with its own writes is as current as a listing.
 */
export async function serviceDeployments(store: Store, watched: PrefixCache, service: string): Promise<Deployment[]> {
  await watched.caughtUp(newestWrite.get(store) ?? 0);
  const own: Deployment[] = [];
  for (const entry of watched.values()) {
    const deployment = decodeCached<Deployment>(entry);
    if (deployment.service === service) own.push(deployment);
  }
  return own.reverse();
}

/**
 * Records a pending deployment of `release` (a new one, a revert to an earlier one, or a
 * reschedule of the current one); `why` is journaled beside it when the trigger needs saying.
 */
export async function startDeployment(store: Store, release: Release, trigger: string, options: { id?: string; why?: string } = {}): Promise<Deployment> {
  const { deployment, operations } = deploymentStart(release, trigger, options);
  // One transaction: the record and its journal lines appear together, in one round trip.
  const { revision } = await store.txn([], operations);
  deploymentWritten(store, deployment, revision);
  return deployment;
}

/**
 * The writes that record a pending deployment of `release`, for a transaction of the caller's:
 * a new release's deployment is written with the release (src/roles/scheduler/deploys/deploy.ts).
 */
export function deploymentStart(release: Release, trigger: string, options: { id?: string; why?: string } = {}): { deployment: Deployment; operations: Operation[] } {
  const now = new Date().toISOString();
  const id = options.id ?? newDeploymentId();
  const deployment: Deployment = { id, service: release.service, release: release.version, image: release.image, state: 'pending', trigger, units: [], wanted: release.config.numInstances, createdAt: now, updatedAt: now };
  const operations: Operation[] = [
    { op: 'put', key: deploymentKey(id), value: JSON.stringify(deployment) },
    journalWrite({ service: release.service, deployment: id, kind: 'deployment.created', message: `v${release.version} ${release.image} (${trigger})` }),
    ...(options.why ? [journalWrite({ service: release.service, deployment: id, kind: `service.${trigger === 'reschedule' ? 'rescheduled' : trigger}`, message: options.why })] : []),
    outboxWrite(deploymentEvent(deployment, 'started', now)),
  ];
  return { deployment, operations };
}

/**
 * The version of each unfinished deployment record this process last wrote, by store. A rollout
 * updates its record at every change of its units (ten units starting: several updates in half a
 * second, while Docker works on the same cores); with the version at hand each update is one
 * compare-and-swap instead of a read and a compare-and-swap. A record someone else wrote since
 * (another leader, a stop) fails the compare and is read afresh. Finished records are dropped.
 */
const lastWritten = new WeakMap<Store, Map<string, Versioned<Deployment>>>();

/** The revision of the newest deployment record this process wrote, by store: what serviceDeployments waits for. */
const newestWrite = new WeakMap<Store, number>();

/**
 * A deployment record this process wrote at `revision` (startDeployment's, or deploymentStart's
 * in the caller's transaction): its next update needs no read, and serviceDeployments sees it.
 */
export function deploymentWritten(store: Store, record: Deployment, revision: number): void {
  newestWrite.set(store, Math.max(newestWrite.get(store) ?? 0, revision));
  let written = lastWritten.get(store);
  if (!written) lastWritten.set(store, (written = new Map()));
  if (isFinished(record)) written.delete(record.id);
  else written.set(record.id, { record, modRevision: revision });
}

async function updateDeployment(store: Store, id: string, change: (current: Deployment) => Deployment, alsoWrite?: (record: Deployment) => Operation[]): Promise<Deployment | undefined> {
  const updated = await updateRecord<Deployment>(store, deploymentKey(id), change, alsoWrite, lastWritten.get(store)?.get(id));
  if (updated) deploymentWritten(store, updated.record, updated.revision);
  else lastWritten.get(store)?.delete(id);
  return updated?.record;
}

const withChange = (change: Partial<Deployment>) => (current: Deployment): Deployment => ({ ...current, ...change, updatedAt: new Date().toISOString() });

/** A step on the way: the images are being pulled, or units are being placed and replaced. */
export const recordPhase = async (store: Store, deployment: Deployment, state: 'pulling' | 'rolling'): Promise<void> => void (await updateDeployment(store, deployment.id, withChange({ state })));

/** What the deployment's units are doing now, for people watching it. */
export const recordProgress = async (store: Store, deployment: Deployment, units: UnitProgress[]): Promise<void> => void (await updateDeployment(store, deployment.id, withChange({ units })));

/** How the deployment's release command runs now, and its last lines (docs/jobs.md). */
export const recordReleaseCommand = async (store: Store, deployment: Deployment, releaseCommand: ReleaseCommandProgress): Promise<void> =>
  void (await updateDeployment(store, deployment.id, withChange({ releaseCommand })));

/**
 * Healing tries a failed reschedule again (src/roles/scheduler/healing/healing-backoff.ts): the same
 * record goes back to pending with one more attempt, so a failure episode stays one entry in the
 * history. Journaled; not notified: the episode was when it began, and is again if it succeeds.
 */
export async function retryReschedule(store: Store, episode: Deployment, why: string): Promise<Deployment | undefined> {
  const attempts = (episode.attempts ?? 1) + 1;
  return updateDeployment(
    store,
    episode.id,
    ({ reason: _reason, retryAt: _retryAt, finishedAt: _finishedAt, ...current }) => ({ ...current, state: 'pending', units: [], attempts, updatedAt: new Date().toISOString() }),
    () => [journalWrite({ service: episode.service, deployment: episode.id, kind: 'service.rescheduled', message: `attempt ${attempts}: ${why}` })],
  );
}

/** A failure episode is over (its units run again, or a newer deployment came): it is no longer retried. */
export async function endEpisode(store: Store, episode: Deployment, why: string): Promise<void> {
  await updateDeployment(
    store,
    episode.id,
    ({ retryAt: _retryAt, ...current }) => current,
    () => [journalWrite({ service: episode.service, deployment: episode.id, kind: 'service.healing-ended', message: `v${episode.release} after ${episode.attempts ?? 1} attempts: ${why}` })],
  );
}

/** The most often a rollout's progress is written. */
export const PROGRESS_INTERVAL_MS = 250;

/** A rollout's writes of its own record, in order: its phase now, its progress as it changes. */
export interface RolloutRecorder {
  /** Written before anything recorded later; resolves once written. */
  phase(state: 'rolling'): Promise<void>;
  /** The newest progress is written within PROGRESS_INTERVAL_MS; throws the error of an earlier write that failed. */
  progress(units: UnitProgress[]): void;
  /** Writes the progress not yet written and waits for every write; throws the first that failed. */
  flush(): Promise<void>;
}

/**
 * Ten units starting change a rollout's progress a dozen times in half a second, and each write is
 * an etcd commit and an event to every watcher, on the cores Docker starts the units with (a
 * 10-unit deploy wrote its record 14 times). The first change is written at once; later ones, and
 * any after a phase (which rewrites the record as well), wait out the interval, and only the
 * newest of them is written. Writes follow `after` (the record's earlier phase, still on its way)
 * and each other.
 */
export function rolloutRecorder(store: Store, deployment: Deployment, after: Promise<void> = Promise.resolve(), intervalMs = PROGRESS_INTERVAL_MS): RolloutRecorder {
  let writes = after;
  let failure: { error: unknown } | undefined;
  let unwritten: UnitProgress[] | undefined;
  let timer: NodeJS.Timeout | undefined;
  let lastWrite = Number.NEGATIVE_INFINITY;
  const enqueue = (write: () => Promise<void>): Promise<void> => {
    writes = writes.then(write).catch((error: unknown) => {
      failure ??= { error };
    });
    return writes;
  };
  const throwFailure = (): void => {
    if (failure) throw failure.error;
  };
  const writeProgress = (): void => {
    timer = undefined;
    const units = unwritten;
    if (units === undefined) return;
    unwritten = undefined;
    lastWrite = Date.now();
    void enqueue(() => recordProgress(store, deployment, units));
  };
  return {
    phase: async (state) => {
      // The phase rewrites the record too: progress that follows waits out the interval from it.
      lastWrite = Date.now();
      await enqueue(() => recordPhase(store, deployment, state));
      throwFailure();
    },
    progress: (units) => {
      throwFailure();
      unwritten = units;
      if (timer !== undefined) return;
      const wait = lastWrite + intervalMs - Date.now();
      if (wait <= 0) writeProgress();
      else timer = setTimeout(writeProgress, wait);
    },
    flush: async () => {
      clearTimeout(timer);
      writeProgress();
      await writes;
      throwFailure();
    },
  };
}

/**
 * The deployment ended: its state, why (unless it succeeded), a journal line and the notification
 * (src/notifications/outbox.ts), in one transaction, so a leader that dies here leaves all or none.
 */
export async function recordOutcome(store: Store, deployment: Deployment, state: 'succeeded' | 'failed' | 'reverted' | 'superseded', reason: string, options: { retryInMs?: number | undefined } = {}): Promise<void> {
  const finishedAt = new Date().toISOString();
  const retryAt = state === 'failed' && options.retryInMs !== undefined ? { retryAt: new Date(Date.parse(finishedAt) + options.retryInMs).toISOString() } : {};
  await updateDeployment(
    store,
    deployment.id,
    (current) => ({ ...current, state, finishedAt, updatedAt: finishedAt, ...(state === 'succeeded' ? {} : { reason }), ...retryAt }),
    (record) => [
      journalWrite({ service: deployment.service, deployment: deployment.id, kind: `deployment.${state}`, message: `v${deployment.release}: ${reason}` }),
      // A retried reschedule tells only that it succeeded: its failure episode was told when it began.
      ...((record.attempts ?? 1) > 1 && state !== 'succeeded' ? [] : [outboxWrite(deploymentEvent(record, state, finishedAt, state === 'succeeded' ? '' : reason))]),
    ],
  );
}

/**
 * Records that the service's units were stopped, as its newest deployment (trigger `stop`), so
 * the deployment it ran before no longer counts as current: self-healing leaves the service
 * alone, and a later deploy of the same image is not taken for "unchanged". Earlier records stay
 * as they were.
 */
export async function recordStop(store: Store, watched: PrefixCache, service: string): Promise<void> {
  const deployments = await serviceDeployments(store, watched, service);
  if (currentTarget(deployments)) {
    const now = new Date().toISOString();
    // What was stopped: the newest deployment, even one the stop superseded part-way.
    const { release, image } = deployments[0]!;
    const stop: Deployment = { id: newDeploymentId(), service, release, image, state: 'succeeded', trigger: 'stop', units: [], wanted: 0, createdAt: now, updatedAt: now, finishedAt: now };
    const { revision } = await store.txn([], [{ op: 'put', key: deploymentKey(stop.id), value: JSON.stringify(stop) }]);
    deploymentWritten(store, stop, revision);
  }
  await appendJournal(store, { service, kind: 'service.stopped', message: `units of ${service} stopped` });
}

/** Deletes records beyond the retention limit (chosen by retention.ts). */
export const deleteDeployments = (store: Store, ids: readonly string[]): Promise<void> => deleteKeys(store, ids.map(deploymentKey));
