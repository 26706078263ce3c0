import { randomBytes } from 'node:crypto';
import type { Operation, Store } from '../../../store/store.js';
import { conflict, notFound } from '../../../http/errors.js';
import type { Release } from '../../../schemas/release.js';
import type { Job } from '../../../schemas/job.js';
import { timeOrderedId } from '../../../store/ids.js';
import { journalWrite } from '../../../store/records/journal.js';
import { pruneJobs, readJob, requestJobStop } from '../../../store/records/jobs.js';
import { jobRules } from '../../../placement/job-placement.js';
import { placeJobIn, type ClusterSnapshot, type ClusterWatch } from '../cluster-snapshot.js';
import type { PlanApplier } from './plan-applier.js';

// The leader's side of jobs (docs/jobs.md): a job of a release is placed like one more unit (pure
// placement in src/placement/job-placement.ts, checked again and committed by the plan applier),
// journaled with who asked, and run by the agent of its machine, which records how it ends. A stop
// is asked of that agent through the job's record.

export interface JobStart {
  kind: Job['kind'];
  release: Release;
  /** None: the image's own command (a scheduled job without `command`). */
  command?: string[] | undefined;
  timeoutSeconds: number;
  /** The machine it must run on (`--machine`); by default the planner picks one. */
  machine?: string | undefined;
  /** The token that asked, as the journal names callers. */
  caller?: string | undefined;
  /** Keep its stdin open for the caller (`platform run` from a terminal, or `-i`). */
  stdin?: boolean | undefined;
  /** A release command's deployment: the job's id follows from it, so the command is placed once per deployment. */
  deployment?: string | undefined;
  /** A scheduled run's id, derived from its tick, so one scheduler only starts it (docs/jobs.md "Scheduled jobs"). */
  id?: string | undefined;
  /** Written in the placement's transaction, only when the job is created by it (a scheduled run's bookkeeping). */
  alsoWrite?: Operation[] | undefined;
}

const jobNoun: Record<Job['kind'], string> = { run: 'job', 'release-command': 'release command', scheduled: 'scheduled run' };

/** How often a job is placed again when the applier refused it (the cluster changed since it was planned). */
const PLACEMENT_ATTEMPTS = 3;

/** A release command's job id: one per deployment, so a leader that resumes the deployment finds it. */
export const releaseCommandJobId = (deployment: string): string => `${deployment}-release`;

export class JobLauncher {
  constructor(
    /** The leader-fenced store. */
    private readonly store: Store,
    private readonly cluster: ClusterWatch,
    private readonly applier: PlanApplier,
  ) {}

  /** Places and records the job, or 409 naming why no machine takes it; a release command placed before is returned as it is. */
  async start(request: JobStart): Promise<Job> {
    const { release } = request;
    const id = request.id ?? (request.deployment ? releaseCommandJobId(request.deployment) : timeOrderedId());
    const name = `${release.service}-run-${id}`;
    const rules = jobRules(name, release.config.resources);
    let reason = '';
    for (let attempt = 0; attempt < PLACEMENT_ATTEMPTS; attempt++) {
      const snapshot = this.cluster.snapshot();
      const placed = placeJobIn(snapshot, rules, request.machine ?? volumeMachine(snapshot, release));
      if ('refusal' in placed) throw conflict(`job of ${release.service} cannot be placed: ${placed.refusal}`);
      const job = jobOf(id, request, placed.machine);
      const line = journalWrite({
        service: release.service,
        ...(job.deployment ? { deployment: job.deployment } : {}),
        kind: 'job.started',
        message: `${jobNoun[job.kind]} ${id} of v${release.version} placed on ${job.machine}${job.caller ? ` for ${job.caller}` : ''}`,
      });
      const applied = await this.applier.applyJob(job, rules, [line, ...(request.alsoWrite ?? [])]);
      if (applied.applied) {
        // History is bounded per service: older finished jobs go as a new one comes.
        await pruneJobs(this.store, release.service).catch(() => undefined);
        return job;
      }
      const existing = await readJob(this.store, id);
      if (existing) return existing;
      reason = applied.reason;
    }
    throw conflict(`job of ${release.service} cannot be placed: ${reason}`);
  }

  /** Asks the job's agent to stop it; 404 when the service has no such job. */
  async stop(service: string, id: string): Promise<Job> {
    const job = await readJob(this.store, id);
    if (!job || job.service !== service) throw notFound(`service ${service} has no job ${id}`);
    return (await requestJobStop(this.store, id)) ?? job;
  }
}

/**
 * Where the release's volumes are: the machine of its instance 1 (a job mounts instance 1's
 * volumes, so it must run beside them). None for a service without volumes, or not placed yet.
 */
function volumeMachine(snapshot: ClusterSnapshot, release: Release): string | undefined {
  if (!release.config.volumes?.length) return undefined;
  return snapshot.assignments.find((assignment) => assignment.service === release.service && assignment.instance === 1)?.machine;
}

function jobOf(id: string, request: JobStart, machine: string): Job {
  const { release } = request;
  return {
    id,
    service: release.service,
    kind: request.kind,
    release: release.version,
    image: release.image,
    ...(request.command ? { command: request.command } : {}),
    env: release.config.env,
    ...(release.config.resources ? { resources: release.config.resources } : {}),
    ...(release.config.volumes?.length ? { volumes: release.config.volumes } : {}),
    machine,
    timeoutSeconds: request.timeoutSeconds,
    ...(request.caller ? { caller: request.caller } : {}),
    ...(request.deployment ? { deployment: request.deployment } : {}),
    ...(request.stdin ? { stdinSecret: randomBytes(24).toString('base64url') } : {}),
    createdAt: new Date().toISOString(),
  };
}
