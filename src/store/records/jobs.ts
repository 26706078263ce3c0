import { jobKey, jobPrefix, jobRunKey, jobRunPrefix, jobScheduleKey, jobSchedulePrefix } from '../keys.js';
import type { Compare, Operation, Store, Watch } from '../store.js';
import { deleteKeys, listRecords, readRecord, updateRecord } from '../json-records.js';
import { JOBS_KEPT_PER_SERVICE, finishedJobStates, jobView, type Job, type JobRun, type JobView } from '../../schemas/job.js';
import type { ScheduleState } from '../../schemas/schedule.js';

// The one owner of /platform/jobs/<id> and /platform/job-runs/<id> (docs/jobs.md). A job is intent:
// placed by the leading scheduler's plan applier, asked to stop by the leading scheduler, pruned by
// it when a service has more than JOBS_KEPT_PER_SERVICE. Its run is what the agent of the job's
// machine observed (state, exit code, the last lines of output), written by that agent and not
// leased: it outlives the container, which the agent removes once the run is recorded. The one
// other writer is the leading scheduler, for a job whose machine was lost: no agent will report its
// end, so it ends it `failed` (endLostJob), unless the agent wrote an end first. A
// scheduled job's state (/platform/job-schedules/<service>: the last tick handled, the failures
// notified) is the leading scheduler's bookkeeping, written in the transaction of what it did.

/** The transaction parts that create a job where no job of its id exists yet. */
export const jobCreate = (job: Job): { compare: Compare; operation: Operation } => ({
  compare: { key: jobKey(job.id), target: 'createRevision', equals: 0 },
  operation: { op: 'put', key: jobKey(job.id), value: JSON.stringify(job) },
});

export async function readJob(store: Store, id: string): Promise<Job | undefined> {
  return (await readRecord<Job>(store, jobKey(id)))?.record;
}

export async function readJobRun(store: Store, id: string): Promise<JobRun | undefined> {
  return (await readRecord<JobRun>(store, jobRunKey(id)))?.record;
}

/**
 * Calls `onRun` with each write of the job's run record, and with what it holds (or undefined) once
 * the watch is open: nothing written in between is missed. `revision` orders what arrives.
 */
export async function watchJobRun(store: Store, id: string, onRun: (run: JobRun | undefined, revision: number) => void): Promise<Watch> {
  const key = jobRunKey(id);
  // The prefix of `<id>` is also that of `<id>-release`: only the key itself is this job's.
  const watch = await store.watchPrefix(key, (event) => {
    if (event.key === key) onRun(event.type === 'put' && event.value ? (JSON.parse(event.value) as JobRun) : undefined, event.modRevision);
  });
  try {
    const current = await readRecord<JobRun>(store, key);
    onRun(current?.record, current?.modRevision ?? 0);
    return watch;
  } catch (error) {
    await watch.close();
    throw error;
  }
}

/** Asks the job's agent to stop it (once: a later ask keeps the first time). Undefined when there is no such job. */
export async function requestJobStop(store: Store, id: string): Promise<Job | undefined> {
  const at = new Date().toISOString();
  return (await updateRecord<Job>(store, jobKey(id), (job) => ({ ...job, stopRequestedAt: job.stopRequestedAt ?? at })))?.record;
}

/** The agent's record of the run, replacing the one before. */
export async function writeJobRun(store: Store, run: JobRun): Promise<void> {
  await store.put(jobRunKey(run.id), JSON.stringify(run));
}

/**
 * Ends a job whose machine was lost (the leading scheduler's healing): its run is recorded `failed`
 * with `reason`, keeping the output its agent reported, and the job is asked to stop, so that the
 * machine's agent, should it come back, removes the container instead of reporting it. Nothing is
 * written when the run has ended, or when its agent wrote in between (its word wins). Returns
 * whether it was ended here.
 */
export async function endLostJob(store: Store, id: string, reason: string): Promise<boolean> {
  const [intent, found] = await Promise.all([readRecord<Job>(store, jobKey(id)), readRecord<JobRun>(store, jobRunKey(id))]);
  if (!intent || (found && finishedJobStates.has(found.record.state))) return false;
  const job = intent.record;
  const at = new Date().toISOString();
  const run: JobRun = {
    id,
    service: job.service,
    machine: job.machine,
    state: 'failed',
    error: reason,
    ...(found?.record.startedAt ? { startedAt: found.record.startedAt } : {}),
    endedAt: at,
    lines: found?.record.lines ?? [],
    lineCount: found?.record.lineCount ?? 0,
    updatedAt: at,
  };
  const result = await store.txn(
    [
      { key: jobKey(id), target: 'modRevision', equals: intent.modRevision },
      found ? { key: jobRunKey(id), target: 'modRevision', equals: found.modRevision } : { key: jobRunKey(id), target: 'createRevision', equals: 0 },
    ],
    [
      { op: 'put', key: jobRunKey(id), value: JSON.stringify(run) },
      { op: 'put', key: jobKey(id), value: JSON.stringify({ ...job, stopRequestedAt: job.stopRequestedAt ?? at }) },
    ],
  );
  return result.succeeded;
}

/** Jobs with what their agents saw, newest first; of one service when given. */
export async function listJobViews(store: Store, service?: string): Promise<JobView[]> {
  const [jobs, runs] = await Promise.all([listRecords<Job>(store, jobPrefix), listRecords<JobRun>(store, jobRunPrefix)]);
  const runOf = new Map(runs.map((run) => [run.id, run]));
  return jobs
    .filter((job) => !service || job.service === service)
    .sort((a, b) => (a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : 0))
    .map((job) => jobView(job, runOf.get(job.id)));
}

/** Deletes the service's finished jobs (and their runs) beyond the newest JOBS_KEPT_PER_SERVICE. */
export async function pruneJobs(store: Store, service: string): Promise<void> {
  const views = await listJobViews(store, service);
  const doomed = views.slice(JOBS_KEPT_PER_SERVICE).filter((view) => finishedJobStates.has(view.state));
  await deleteKeys(store, doomed.flatMap((view) => [jobKey(view.id), jobRunKey(view.id)]));
}

export async function readScheduleState(store: Store, service: string): Promise<ScheduleState | undefined> {
  return (await readRecord<ScheduleState>(store, jobScheduleKey(service)))?.record;
}

export const listScheduleStates = (store: Store): Promise<ScheduleState[]> => listRecords<ScheduleState>(store, jobSchedulePrefix);

/** The operation that records a schedule's state, for the transaction of the tick it handled. */
export const scheduleStateWrite = (state: ScheduleState): Operation => ({ op: 'put', key: jobScheduleKey(state.service), value: JSON.stringify(state) });

/** Deletes the schedule state of a service that is no longer a scheduled job (or no longer declared). */
export async function deleteScheduleState(store: Store, service: string): Promise<void> {
  await deleteKeys(store, [jobScheduleKey(service)]);
}
