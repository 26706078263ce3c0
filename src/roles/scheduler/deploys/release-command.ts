import type { Store } from '../../../store/store.js';
import { HttpError } from '../../../http/errors.js';
import { RELEASE_COMMAND_LINES, type Deployment, type Release, type ReleaseCommandProgress } from '../../../schemas/release.js';
import { DEFAULT_RELEASE_COMMAND_SECONDS, finishedJobStates, jobDurationSeconds, type JobRun } from '../../../schemas/job.js';
import { readJobRun } from '../../../store/records/jobs.js';
import { recordReleaseCommand } from '../../../store/records/deployments.js';
import type { JobLauncher } from './jobs.js';

// A deploy's release command (docs/jobs.md): run once, as a job of the new release, before any unit
// is replaced. Its progress and last lines are written into the deployment's record as they come
// (so `/events` and `platform deploy` show them); a non-zero exit, a timeout or a job that cannot
// be placed fails the deployment with its last lines, and nothing is rolled.

export interface ReleaseCommandOptions {
  /** The leader-fenced store. */
  store: Store;
  launcher: JobLauncher;
  /** False once a newer deployment of the service was accepted: the command is stopped. */
  isCurrent: () => boolean;
}

export type ReleaseCommandOutcome = { state: 'done' } | { state: 'failed'; reason: string } | { state: 'superseded' };

/** How often the job's run record is read while it runs. */
const POLL_MS = 250;
/** Beyond its own timeout, how long the scheduler waits for the agent to report the end (its machine may be gone). */
const REPORT_GRACE_SECONDS = 60;
/** Lines of output the failure's reason quotes. */
const REASON_LINES = 5;

/**
 * A new release runs its command; a rollback only when asked (`--run-release-command`), and a
 * reschedule or a revert to the last good release never: their release ran it when it was new.
 */
export const runsReleaseCommand = (release: Release, deployment: Pick<Deployment, 'trigger'>): boolean =>
  release.config.releaseCommand !== undefined &&
  deployment.trigger !== 'reschedule' &&
  deployment.trigger !== 'revert' &&
  (release.rollbackOf === undefined || release.runReleaseCommand === true);

export async function runReleaseCommand(options: ReleaseCommandOptions, release: Release, deployment: Deployment): Promise<ReleaseCommandOutcome> {
  const command = release.config.releaseCommand;
  if (!command || !runsReleaseCommand(release, deployment)) return { state: 'done' };
  const { store, launcher } = options;
  const timeoutSeconds = jobDurationSeconds(release.config.releaseCommandTimeout ?? '') ?? DEFAULT_RELEASE_COMMAND_SECONDS;
  let job;
  try {
    job = await launcher.start({ kind: 'release-command', release, command, timeoutSeconds, deployment: deployment.id });
  } catch (error) {
    if (error instanceof HttpError && error.statusCode === 409) return { state: 'failed', reason: `release command: ${error.message}` };
    throw error;
  }
  const deadline = Date.parse(job.createdAt) + (job.timeoutSeconds + REPORT_GRACE_SECONDS) * 1000;
  let written = '';
  for (;;) {
    const run = await readJobRun(store, job.id);
    const progress = progressOf(job.id, job.machine, run);
    const json = JSON.stringify(progress);
    if (json !== written) {
      written = json;
      await recordReleaseCommand(store, deployment, progress);
    }
    if (run && finishedJobStates.has(run.state)) {
      return run.state === 'exited' && run.exitCode === 0 ? { state: 'done' } : { state: 'failed', reason: failureOf(run) };
    }
    if (!options.isCurrent()) {
      await launcher.stop(release.service, job.id);
      return { state: 'superseded' };
    }
    if (Date.now() > deadline) {
      await launcher.stop(release.service, job.id);
      return { state: 'failed', reason: `release command: no end reported by the agent of ${job.machine} within ${job.timeoutSeconds + REPORT_GRACE_SECONDS} s` };
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

const progressOf = (job: string, machine: string, run: JobRun | undefined): ReleaseCommandProgress => ({
  job,
  machine,
  state: run?.state ?? 'pending',
  ...(run?.exitCode !== undefined ? { exitCode: run.exitCode } : {}),
  lines: (run?.lines ?? []).slice(-RELEASE_COMMAND_LINES),
  lineCount: run?.lineCount ?? 0,
});

/** "release command exited with code 3; its last lines: …" */
function failureOf(run: JobRun): string {
  const how =
    run.state === 'timed-out' ? `timed out${run.error ? ` (${run.error})` : ''}` :
    run.state === 'exited' ? `exited with code ${run.exitCode}` :
    `${run.state}${run.error ? `: ${run.error}` : ''}`;
  const last = run.lines.slice(-REASON_LINES);
  return `release command ${how}; nothing was rolled${last.length > 0 ? `; its last lines: ${last.join(' | ')}` : ''}`;
}
