import { Type, type Static } from '@sinclair/typebox';
import { NameParams, ServiceName, errorResponses, literalUnion, writeRefusals } from './common.js';
import { MachineId } from './cluster.js';
import { Env, Resources, Volumes } from './service.js';
import { Command, JobDuration, MAX_JOB_SECONDS } from './command.js';

export { DEFAULT_JOB_SECONDS, DEFAULT_RELEASE_COMMAND_SECONDS, MAX_JOB_SECONDS, jobDurationSeconds } from './command.js';

// Jobs (issue 32): one container of a service's release that runs a command to its end, on a
// machine the planner picks, beside the service's units but never one of them. `platform run`
// starts one (a one-off job); a deploy starts one for the release's `releaseCommand`.

/** POST /services/:name/jobs. */
export const JobRequest = Type.Object(
  {
    command: Command,
    release: Type.Optional(Type.String({ pattern: '^v?[1-9][0-9]{0,8}$', description: 'a release version: v3 or 3 (default: the release the service runs)' })),
    machine: Type.Optional(MachineId),
    timeout: Type.Optional(JobDuration),
    stdin: Type.Optional(
      Type.Boolean({
        description:
          "keep the command's stdin open for `PUT /services/:name/jobs/:id/stdin` (as `docker run -i`); without it the command reads an empty stdin",
      }),
    ),
  },
  { additionalProperties: false },
);
export type JobRequest = Static<typeof JobRequest>;

/** `run`: `platform run`; `release-command`: a deploy's; `scheduled`: a tick of the service's schedule. */
export const jobKinds = ['run', 'release-command', 'scheduled'] as const;

/**
 * Intent: the job the leading scheduler placed on a machine. Its agent runs it; `stopRequestedAt`
 * asks the agent to stop it (Ctrl-C of `platform run`, a deployment superseded).
 */
export const Job = Type.Object({
  id: Type.String(),
  service: ServiceName,
  kind: literalUnion(jobKinds),
  release: Type.Integer({ minimum: 1 }),
  image: Type.String(),
  /** None: the image's own command (CMD), as a scheduled job without `command` runs. */
  command: Type.Optional(Command),
  env: Env,
  resources: Type.Optional(Resources),
  /** The service's volumes, mounted as its instance 1 has them (docs/jobs.md "Volumes"). */
  volumes: Type.Optional(Volumes),
  machine: MachineId,
  timeoutSeconds: Type.Integer({ minimum: 1, maximum: MAX_JOB_SECONDS }),
  /** The token that started it (`local` for an unauthenticated local call), as the journal names callers. */
  caller: Type.Optional(Type.String()),
  /** The deployment whose release command it is. */
  deployment: Type.Optional(Type.String()),
  createdAt: Type.String(),
  stopRequestedAt: Type.Optional(Type.String()),
  /**
   * Present when its stdin is kept open: what the orchestrator shows the job's agent to pass bytes
   * to it. Only readers of the store know it (never a unit, never the API), so only the orchestrator attaches.
   */
  stdinSecret: Type.Optional(Type.String()),
});
export type Job = Static<typeof Job>;

export const jobStates = ['pending', 'starting', 'running', 'exited', 'stopped', 'timed-out', 'failed'] as const;
export type JobState = (typeof jobStates)[number];
/** States a job does not leave. */
export const finishedJobStates: ReadonlySet<JobState> = new Set(['exited', 'stopped', 'timed-out', 'failed']);

/** How much of a job's output is kept with it: the last lines, at most this many and bytes. */
export const JOB_OUTPUT_LINES = 1000;
export const JOB_OUTPUT_BYTES = 64 * 1024;

/** What the job's agent observed of it: written by that agent only, kept after the container is removed. */
export const JobRun = Type.Object({
  id: Type.String(),
  service: ServiceName,
  machine: MachineId,
  state: literalUnion(jobStates.filter((state) => state !== 'pending')),
  exitCode: Type.Optional(Type.Integer()),
  /** Why it failed to run or stopped, for a person. */
  error: Type.Optional(Type.String()),
  startedAt: Type.Optional(Type.String()),
  endedAt: Type.Optional(Type.String()),
  /** The last lines of its output (stdout and stderr interleaved), at most JOB_OUTPUT_LINES and JOB_OUTPUT_BYTES. */
  lines: Type.Array(Type.String()),
  /** Lines it printed in all: `lines` are the last of them. */
  lineCount: Type.Integer({ minimum: 0 }),
  updatedAt: Type.String(),
});
export type JobRun = Static<typeof JobRun>;

/** A job as the API lists it: its intent and what its agent saw, without its output (`platform logs NAME --job ID`). */
export const JobView = Type.Object({
  id: Type.String(),
  service: ServiceName,
  kind: literalUnion(jobKinds),
  release: Type.Integer(),
  command: Type.Optional(Command),
  machine: Type.String(),
  state: literalUnion(jobStates),
  exitCode: Type.Optional(Type.Integer()),
  error: Type.Optional(Type.String()),
  caller: Type.Optional(Type.String()),
  deployment: Type.Optional(Type.String()),
  timeoutSeconds: Type.Integer(),
  createdAt: Type.String(),
  startedAt: Type.Optional(Type.String()),
  endedAt: Type.Optional(Type.String()),
  stopRequestedAt: Type.Optional(Type.String()),
  lineCount: Type.Integer({ minimum: 0 }),
});
export type JobView = Static<typeof JobView>;

export const jobView = (job: Job, run: JobRun | undefined): JobView => ({
  id: job.id,
  service: job.service,
  kind: job.kind,
  release: job.release,
  ...(job.command ? { command: job.command } : {}),
  machine: job.machine,
  state: run?.state ?? 'pending',
  ...(run?.exitCode !== undefined ? { exitCode: run.exitCode } : {}),
  ...(run?.error ? { error: run.error } : {}),
  ...(job.caller ? { caller: job.caller } : {}),
  ...(job.deployment ? { deployment: job.deployment } : {}),
  timeoutSeconds: job.timeoutSeconds,
  createdAt: job.createdAt,
  ...(run?.startedAt ? { startedAt: run.startedAt } : {}),
  ...(run?.endedAt ? { endedAt: run.endedAt } : {}),
  ...(job.stopRequestedAt ? { stopRequestedAt: job.stopRequestedAt } : {}),
  lineCount: run?.lineCount ?? 0,
});

/** The header in which the orchestrator shows a job's agent the job's stdin secret. */
export const JOB_STDIN_SECRET_HEADER = 'x-platform-job-stdin-secret';

/** `PUT /services/:name/jobs/:id/stdin` (and the agent's `PUT /jobs/:id/stdin`): the bytes are the request's body, streamed. */
export const JOB_STDIN_TYPE = 'application/octet-stream';

export const JobParams = Type.Object({ name: ServiceName, id: Type.String({ pattern: '^[a-z0-9-]{1,64}$', description: 'a job id' }) });
export type JobParams = Static<typeof JobParams>;

export const JobListQuery = Type.Object({ service: Type.Optional(ServiceName) }, { additionalProperties: false });

export const JobOutputQuery = Type.Object(
  {
    tail: Type.Integer({ minimum: 0, maximum: JOB_OUTPUT_LINES, default: JOB_OUTPUT_LINES, description: 'lines from the end of the kept output' }),
    follow: Type.Boolean({ default: false, description: 'keep streaming new lines until the job ends' }),
  },
  { additionalProperties: false },
);

/** Jobs listed: the newest this many per service. */
export const JOBS_KEPT_PER_SERVICE = 50;

// Route schemas the scheduler serves and the orchestrator forwards: written once, used by both.

export const startJobSchema = {
  description:
    "Run a command once in a container of the service's release (its image, env and volumes; no port, no route) on a machine the planner picks, " +
    'or `machine`. Answers at once with the job; follow its output with `GET /services/:name/jobs/:id/output?follow=true`.',
  params: NameParams,
  body: JobRequest,
  response: { 201: JobView, ...errorResponses, ...writeRefusals },
};

export const listJobsSchema = {
  description: 'Jobs, newest first (the newest 50 finished ones of each service are kept).',
  querystring: JobListQuery,
  response: { 200: Type.Array(JobView), ...errorResponses },
};

export const getJobSchema = { summary: 'One job', params: JobParams, response: { 200: JobView, ...errorResponses } };

export const stopJobSchema = {
  description: "Stop a job: its agent stops the container (SIGTERM, then SIGKILL after 10 s) and records it `stopped`.",
  params: JobParams,
  response: { 200: JobView, ...errorResponses },
};
