import type { FastifyBaseLogger } from 'fastify';
import type { Operation, Store } from '../../../store/store.js';
import { FencedWriteError } from '../../../store/fenced-store.js';
import { HttpError } from '../../../http/errors.js';
import { serviceDeployments } from '../../../store/records/deployments.js';
import type { PrefixCache } from '../../../store/prefix-cache.js';
import { getRelease } from '../../../store/records/releases.js';
import { journalWrite } from '../../../store/records/journal.js';
import { deleteScheduleState, listJobViews, listScheduleStates, readScheduleState, scheduleStateWrite } from '../../../store/records/jobs.js';
import { outboxWrite } from '../../../notifications/outbox.js';
import { jobFailedEvent } from '../../../notifications/events.js';
import { scheduleStep, tickOfRunId, type ScheduledRun } from '../../../schedules/schedule-plan.js';
import { DEFAULT_JOB_SECONDS, finishedJobStates, jobDurationSeconds, type JobView } from '../../../schemas/job.js';
import type { Release } from '../../../schemas/release.js';
import type { ScheduleState } from '../../../schemas/schedule.js';
import { WorkQueue } from '../../../work-queue.js';
import { NotLeaderError } from '../leadership.js';
import type { ClusterWatch } from '../cluster-snapshot.js';
import type { JobLauncher } from '../deploys/jobs.js';

// The leader's side of scheduled jobs (docs/jobs.md "Scheduled jobs"). Per service, one pass on a
// work queue: it reads the release the service runs, the schedule's state and its runs, asks the
// pure schedule-plan.ts which tick is due and what the concurrency policy does, and does it.
// Exactly once per tick, across leaders: the run's id follows from (service, tick), the job record
// is created only where none of that id exists, in the fenced transaction that also records the
// tick as handled. A new leader looks at every service at once: a tick its predecessor handled
// is found handled (or its run found existing); a tick it missed is run late, the newest only.

export interface ScheduledRunsOptions {
  /** The leader-fenced store. */
  store: Store;
  /** The scheduler's watched copy of the deployment records (records/deployments.ts watchDeployments). */
  deployments: PrefixCache;
  cluster: ClusterWatch;
  jobs: JobLauncher;
  isLeader: () => boolean;
  log: FastifyBaseLogger;
}

/** How often the leader looks at every service besides its ticks: a deploy that adds a schedule is seen within it. */
const RESYNC_MS = 10_000;
/** Past a tick before its pass runs, so the clock has surely passed it. */
const TICK_SLACK_MS = 20;
/** Runs whose failure was notified, and skipped ticks, remembered per schedule. */
const NOTIFIED_KEPT = 100;
const SKIPS_KEPT = 20;
/** Who the journal and the job list name as a scheduled run's caller. */
const SCHEDULE_CALLER = 'schedule';

export class ScheduledRuns {
  private readonly passes = new WorkQueue({
    run: (service) => this.pass(service),
    onError: (error, service) => {
      if (!(error instanceof FencedWriteError || error instanceof NotLeaderError)) this.options.log.warn({ err: error, service }, 'scheduled jobs: a pass failed; retrying');
    },
    retry: { firstMs: 1000, maxMs: RESYNC_MS },
  });
  private readonly resync: NodeJS.Timeout;
  /** Set once this scheduler has taken over as leader (its ids sort after its predecessor's); cleared when deposed. */
  private leading = false;

  constructor(private readonly options: ScheduledRunsOptions) {
    this.resync = setInterval(() => void this.lookAtAll(), RESYNC_MS);
  }

  /** On election, once the leader has taken over: ticks due while no scheduler led run now (the newest of each schedule). */
  lead(): Promise<void> {
    this.leading = true;
    return this.lookAtAll();
  }

  forget(): void {
    this.leading = false;
  }

  /**
   * On taking over, and every RESYNC_MS while leading: a pass for every service that may be a scheduled
   * job: one whose next config has a schedule (a deploy copies it into the release), and one the
   * leader kept a schedule's state for (its schedule may have been deployed away, or the service deleted).
   */
  private async lookAtAll(): Promise<void> {
    if (!this.leading || !this.options.isLeader()) return;
    try {
      const names = new Set(this.options.cluster.snapshot().services.filter((service) => service.config.schedule !== undefined).map((service) => service.name));
      for (const state of await listScheduleStates(this.options.store)) names.add(state.service);
      for (const name of names) void this.passes.add(name);
    } catch (error) {
      this.options.log.warn({ err: error }, 'scheduled jobs: could not list the services; retrying at the next resync');
    }
  }

  async close(): Promise<void> {
    clearInterval(this.resync);
    await this.passes.close();
  }

  private async pass(service: string): Promise<void> {
    if (!this.leading || !this.options.isLeader()) return;
    const { store } = this.options;
    const [scheduled, state] = await Promise.all([this.scheduledRelease(service), readScheduleState(store, service)]);
    if (!scheduled) {
      if (state) await deleteScheduleState(store, service);
      return;
    }
    const { release, sinceMs } = scheduled;
    const runs = (await listJobViews(store, service)).filter((job) => job.kind === 'scheduled');
    const notified = state ? await this.notifyFailures(state, runs, release) : undefined;
    const step = scheduleStep({
      service,
      spec: { schedule: release.config.schedule!, timeZone: release.config.timeZone },
      policy: release.config.concurrency ?? 'forbid',
      lastTickMs: state ? Date.parse(state.lastTick) : undefined,
      sinceMs,
      runs: runs.map(scheduledRun),
      nowMs: Date.now(),
    });
    if (step.due) {
      const handled = { ...(notified ?? { service, notified: [], skipped: [] }), lastTick: new Date(step.due.tickMs).toISOString(), updatedAt: new Date().toISOString() };
      const { decision } = step.due;
      if (decision.start) await this.startRun(release, step.due.runId, handled, decision.stop);
      else await this.skip(release, handled, decision.skipped);
    }
    this.passes.addAfter(service, step.nextTickMs - Date.now() + TICK_SLACK_MS);
  }

  /**
   * The release whose schedule runs, and since when: the newest succeeded deployment's, unless it
   * stopped the service. A deployment in flight changes nothing until it succeeds.
   */
  private async scheduledRelease(service: string): Promise<{ release: Release; sinceMs: number } | undefined> {
    if (!this.options.cluster.declaration(service)) return undefined;
    const settled = (await serviceDeployments(this.options.store, this.options.deployments, service)).find((deployment) => deployment.state === 'succeeded');
    if (!settled || settled.trigger === 'stop') return undefined;
    const release = await getRelease(this.options.store, service, settled.release);
    return release?.config.schedule === undefined ? undefined : { release, sinceMs: Date.parse(settled.createdAt) };
  }

  /** Starts the tick's run (once: a run of its id placed before is found, not doubled), stopping those `replace` ends. */
  private async startRun(release: Release, runId: string, handled: ScheduleState, stop: readonly string[]): Promise<void> {
    const { jobs, store } = this.options;
    for (const id of stop) {
      await jobs.stop(release.service, id);
      await store.txn([], [journalWrite({ service: release.service, kind: 'schedule.replaced', message: `run ${id} stopped: the tick ${handled.lastTick} replaces it (concurrency replace)` })]);
    }
    const config = release.config;
    try {
      await jobs.start({
        kind: 'scheduled',
        release,
        command: config.command,
        timeoutSeconds: jobDurationSeconds(config.timeout ?? '') ?? DEFAULT_JOB_SECONDS,
        caller: SCHEDULE_CALLER,
        id: runId,
        alsoWrite: [scheduleStateWrite(handled)],
      });
    } catch (error) {
      if (!(error instanceof HttpError && error.statusCode === 409)) throw error;
      // No machine takes it: the tick is handled (a later one runs as usual) and its failure told once.
      const reason = `could not run: ${error.message}`;
      await store.txn(
        [],
        [
          scheduleStateWrite({ ...handled, notified: [...handled.notified, runId].slice(-NOTIFIED_KEPT) }),
          journalWrite({ service: release.service, kind: 'schedule.failed', message: `run ${runId} of the tick ${handled.lastTick} ${reason}` }),
          outboxWrite(jobFailedEvent({ service: release.service, run: runId, tick: handled.lastTick, release: release.version, reason, at: new Date().toISOString() })),
        ],
      );
    }
  }

  /** A tick `forbid` skips: recorded in the schedule's state and the journal. */
  private async skip(release: Release, handled: ScheduleState, reason: string): Promise<void> {
    const skipped = [...handled.skipped, { tick: handled.lastTick, reason }].slice(-SKIPS_KEPT);
    await this.options.store.txn(
      [],
      [
        scheduleStateWrite({ ...handled, skipped }),
        journalWrite({ service: release.service, kind: 'schedule.skipped', message: `tick ${handled.lastTick} of "${release.config.schedule}" skipped: ${reason}` }),
      ],
    );
  }

  /** Tells each failed run once (its id joins `notified` in the transaction that writes its event); returns the state after. */
  private async notifyFailures(state: ScheduleState, runs: readonly JobView[], release: Release): Promise<ScheduleState> {
    const told = new Set(state.notified);
    const failed = runs.filter((run) => !told.has(run.id) && failureOf(run) !== undefined);
    if (failed.length === 0) return state;
    const next = { ...state, notified: [...state.notified, ...failed.map((run) => run.id)].slice(-NOTIFIED_KEPT), updatedAt: new Date().toISOString() };
    const events = failed.map((run) =>
      outboxWrite(
        jobFailedEvent({
          service: release.service,
          run: run.id,
          tick: tickOf(run),
          release: run.release,
          reason: failureOf(run)!,
          exitCode: run.exitCode,
          at: run.endedAt ?? new Date().toISOString(),
        }),
      ),
    );
    const operations: Operation[] = [scheduleStateWrite(next), ...events];
    await this.options.store.txn([], operations);
    return next;
  }
}

/** Why a finished run failed, or undefined when it did not (exit 0, or stopped on purpose). */
function failureOf(run: JobView): string | undefined {
  if (run.state === 'exited') return run.exitCode === 0 ? undefined : `exited with code ${run.exitCode ?? 'unknown'}`;
  if (run.state === 'timed-out') return `timed out after ${run.timeoutSeconds} s`;
  if (run.state === 'failed') return `could not run: ${run.error ?? 'no reason given'}`;
  return undefined;
}

const tickOf = (run: JobView): string => {
  const tickMs = tickOfRunId(run.id);
  return tickMs === undefined ? run.createdAt : new Date(tickMs).toISOString();
};

const scheduledRun = (job: JobView): ScheduledRun => ({ id: job.id, finished: finishedJobStates.has(job.state), createdAt: job.createdAt, timeoutSeconds: job.timeoutSeconds });
