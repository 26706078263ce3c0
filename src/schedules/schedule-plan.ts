import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import type { CronExpression, CronExpressionParser } from 'cron-parser';
import type { ConcurrencyPolicy } from '../schemas/schedule.js';

// Scheduled jobs, pure (docs/jobs.md "Scheduled jobs"): which tick of a cron schedule is due, what
// the run of a tick is called, and what the concurrency policy does with the runs still going. No
// I/O and no clock: the leader's loop (src/roles/scheduler/schedules/) passes the time in.
//
// Decisions follow Kubernetes' CronJob: a tick missed while no scheduler led (an outage, an
// election) is run late, but of several missed ticks only the newest (CronJob with a
// startingDeadlineSeconds that covers one period); `forbid` skips a tick while a run goes on,
// `allow` starts another, `replace` stops the running ones and starts the new one.

export interface ScheduleSpec {
  /** Five-field cron: minute hour day-of-month month day-of-week. */
  schedule: string;
  /** IANA zone the fields are read in; UTC when unset. */
  timeZone?: string | undefined;
}

const UTC = 'UTC';

// cron-parser, with the luxon it loads (8.4 MiB of RSS imported into a bare Node; 1 to 2 MiB of an
// idle role's heap), is loaded by the first schedule read or checked, not when the scheduler or
// directory starts: most clusters have no schedule (issue 29's idle memory of each role). Its
// package is CommonJS, so it loads at once.
let cronParser: typeof CronExpressionParser | undefined;
const parser = (): typeof CronExpressionParser =>
  (cronParser ??= (createRequire(import.meta.url)('cron-parser') as { CronExpressionParser: typeof CronExpressionParser }).CronExpressionParser);

function expression(spec: ScheduleSpec, currentMs: number): CronExpression {
  return parser().parse(spec.schedule, { currentDate: new Date(currentMs), tz: spec.timeZone ?? UTC });
}

/** Why the schedule cannot be used, naming the field and the rule; undefined when it can. */
export function scheduleProblem(spec: ScheduleSpec): string | undefined {
  const fields = spec.schedule.trim().split(/\s+/);
  if (fields.length !== 5) {
    return `schedule must be five cron fields (minute hour day-of-month month day-of-week), such as "*/5 * * * *"; got ${fields.length} in "${spec.schedule}"`;
  }
  if (spec.timeZone !== undefined && !isTimeZone(spec.timeZone)) return `timeZone must be an IANA time zone such as Europe/Paris or UTC; got "${spec.timeZone}"`;
  try {
    expression(spec, 0).next();
  } catch (error) {
    return `schedule "${spec.schedule}" is not a cron expression: ${(error as Error).message}`;
  }
  return undefined;
}

function isTimeZone(zone: string): boolean {
  try {
    new Intl.DateTimeFormat('en', { timeZone: zone });
    return true;
  } catch {
    return false;
  }
}

/** The newest tick in (afterMs, nowMs], as ms since the epoch; undefined when none fell in it. */
export function newestTick(spec: ScheduleSpec, afterMs: number, nowMs: number): number | undefined {
  // prev() finds the neighbourhood (it answers the newest tick strictly before its current date), but
  // in an hour a zone repeats in autumn it answers the repeat, which next() skips: ticks are then
  // counted forward, as next() counts them, from before that hour. Otherwise a run at 01:30 EDT would
  // be followed by a second at 01:30 EST.
  const near = expression(spec, nowMs + 1).prev().getTime();
  const from = Math.max(afterMs, near - DST_SHIFT_BOUND_MS);
  const ticks = expression(spec, from);
  let newest: number | undefined;
  for (let tick = ticks.next().getTime(); tick <= nowMs; tick = ticks.next().getTime()) newest = tick;
  return newest !== undefined && newest > afterMs ? newest : undefined;
}

/** More than any zone's clock change (an hour; Lord Howe's half hour). */
const DST_SHIFT_BOUND_MS = 2 * 3600_000;

/** The first tick after nowMs. */
export const nextTick = (spec: ScheduleSpec, nowMs: number): number => expression(spec, nowMs).next().getTime();

/**
 * The id of the service's run of a tick: the same for every scheduler that looks at that tick, so
 * the job record's create-if-absent lets one start through. The tick's UTC minute names it; a hash
 * of the service keeps runs of services that tick together apart (job ids are cluster-wide).
 */
export function scheduledRunId(service: string, tickMs: number): string {
  const minute = new Date(tickMs).toISOString().slice(0, 16).replace(/[-T:]/g, '');
  return `cron-${minute}-${createHash('sha256').update(service).digest('hex').slice(0, 8)}`;
}

/** The tick a run id names (scheduledRunId's inverse, to the minute), or undefined for an id it did not make. */
export function tickOfRunId(id: string): number | undefined {
  const minute = /^cron-(\d{4})(\d{2})(\d{2})(\d{2})(\d{2})-[0-9a-f]{8}$/.exec(id);
  return minute ? Date.UTC(Number(minute[1]), Number(minute[2]) - 1, Number(minute[3]), Number(minute[4]), Number(minute[5])) : undefined;
}

/** A scheduled run as the policy sees it. */
export interface ScheduledRun {
  id: string;
  /** Whether it has ended (exited, stopped, timed out, failed to run). */
  finished: boolean;
  createdAt: string;
  timeoutSeconds: number;
}

/**
 * How long past its timeout a run that never reported an end (its machine went away with it)
 * still counts as going: the agent stops a run at its timeout, so one older than that is gone.
 */
export const LOST_RUN_GRACE_MS = 60_000;

/** The runs still going at nowMs, oldest first. */
export function runsGoing(runs: readonly ScheduledRun[], nowMs: number): ScheduledRun[] {
  return runs
    .filter((run) => !run.finished && Date.parse(run.createdAt) + run.timeoutSeconds * 1000 + LOST_RUN_GRACE_MS > nowMs)
    .sort((a, b) => (a.createdAt < b.createdAt ? -1 : a.createdAt > b.createdAt ? 1 : 0));
}

export type TickDecision = { start: true; stop: string[] } | { start: false; skipped: string };

/** What a due tick does, given the runs still going. */
export function tickDecision(policy: ConcurrencyPolicy, going: readonly ScheduledRun[]): TickDecision {
  if (going.length === 0 || policy === 'allow') return { start: true, stop: [] };
  if (policy === 'replace') return { start: true, stop: going.map((run) => run.id) };
  const ids = going.map((run) => run.id).join(', ');
  return { start: false, skipped: `concurrency forbid: ${going.length === 1 ? 'run' : 'runs'} ${ids} still going` };
}

export interface ScheduleStepInput {
  service: string;
  spec: ScheduleSpec;
  policy: ConcurrencyPolicy;
  /** The last tick handled (run, skipped or refused), if any. */
  lastTickMs: number | undefined;
  /** When the release that carries the schedule was deployed: no tick before it is run. */
  sinceMs: number;
  runs: readonly ScheduledRun[];
  nowMs: number;
}

export interface ScheduleStep {
  /** The tick to handle now, with its run's id and what to do, if one is due. */
  due?: { tickMs: number; runId: string; decision: TickDecision };
  /** When to look again: the next tick. */
  nextTickMs: number;
}

/** One look at a schedule: the newest tick not yet handled (at most one, however many were missed), and the next. */
export function scheduleStep(input: ScheduleStepInput): ScheduleStep {
  const after = Math.max(input.lastTickMs ?? -Infinity, input.sinceMs - 1);
  const tickMs = newestTick(input.spec, after, input.nowMs);
  const nextTickMs = nextTick(input.spec, input.nowMs);
  if (tickMs === undefined) return { nextTickMs };
  const runId = scheduledRunId(input.service, tickMs);
  const going = runsGoing(input.runs.filter((run) => run.id !== runId), input.nowMs);
  return { due: { tickMs, runId, decision: tickDecision(input.policy, going) }, nextTickMs };
}
