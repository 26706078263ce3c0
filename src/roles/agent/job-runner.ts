import { timingSafeEqual } from 'node:crypto';
import { PassThrough, type Writable } from 'node:stream';
import type Docker from 'dockerode';
import type { FastifyBaseLogger } from 'fastify';
import type { Store } from '../../store/store.js';
import { jobPrefix } from '../../store/keys.js';
import { PrefixCache, decodeCached } from '../../store/prefix-cache.js';
import { readJobRun, writeJobRun } from '../../store/records/jobs.js';
import { appendJournal } from '../../store/records/journal.js';
import { JOB_OUTPUT_BYTES, JOB_OUTPUT_LINES, finishedJobStates, type Job, type JobRun } from '../../schemas/job.js';
import type { UnitLogRotation } from '../../config.js';
import type { CredentialLookup } from '../../auth/registry-credentials.js';
import { WorkQueue } from '../../work-queue.js';
import { ensureImage } from './containers.js';
import { unitConfinement, unitLimits, unitLogConfig, type NetworkMode } from './container-spec.js';
import { unitMounts } from './unit-volumes.js';
import { dockerErrorMessage } from './docker-client.js';
import { JobOutput } from './job-output.js';
import { JobStdins } from './job-stdin.js';
import { conflict, forbidden, notFound } from '../../http/errors.js';

// The agent's jobs (docs/jobs.md): each job the scheduler placed on this machine runs once, in a
// container of its release named `<service>-run-<id>.service`. Job containers carry none of the
// units' labels (`platform.managed`), so the unit reconciler never sees, adopts or removes one. The
// output is read from the container's attached stream (complete up to its last line, as `docker
// run` reads it), kept bounded in the job's run record (written at most every WRITE_INTERVAL_MS while
// it runs), and the container is removed once its end is recorded. A stop asked in the job's record,
// or its timeout, stops the container (SIGTERM, then SIGKILL after STOP_GRACE_SECONDS). A job that
// keeps its stdin open is attached to it too (`docker run -i`): the orchestrator passes on its
// caller's bytes, showing the job's stdin secret (only readers of the store know it).

export const jobLabels = { job: 'platform.job', machine: 'platform.job-machine', service: 'platform.job-service' } as const;

export const jobContainerName = (job: Pick<Job, 'service' | 'id'>): string => `${job.service}-run-${job.id}.service`;

/** How often a running job's output is written to its record at most. */
const WRITE_INTERVAL_MS = 250;
const STOP_GRACE_SECONDS = 10;
/** The one key of the job runner's work queue: every pass looks at all of this machine's jobs. */
const JOBS = 'jobs';
const RESYNC_MS = 5_000;

export interface JobRunnerOptions {
  store: Store;
  docker: Docker;
  machineId: string;
  network: NetworkMode;
  /** `uid[:gid]` jobs run as on host networking, as units do. */
  hostNetworkUser: string;
  unitLogs: UnitLogRotation;
  defaultMemoryMB?: number;
  credentials: CredentialLookup;
  log: FastifyBaseLogger;
}

type Ending = 'stopped' | 'timed-out';

interface RunningJob {
  /** Stops the container; the run records `why`. */
  stop(why: Ending): void;
  done: Promise<void>;
}

export class JobRunner {
  private jobs: PrefixCache | undefined;
  private readonly running = new Map<string, RunningJob>();
  /** Jobs whose end is recorded: nothing more to do for them here. */
  private readonly settled = new Set<string>();
  private readonly stdins = new JobStdins();
  private readonly passes: WorkQueue;
  private resync: NodeJS.Timeout | undefined;

  constructor(private readonly options: JobRunnerOptions) {
    this.passes = new WorkQueue({
      run: () => this.pass(),
      onError: (error) => options.log.warn({ err: error, machine: options.machineId }, 'job pass failed; retrying at the next resync'),
    });
  }

  async start(): Promise<void> {
    this.jobs = await PrefixCache.start(this.options.store, jobPrefix);
    this.jobs.onChange(() => void this.passes.add(JOBS));
    this.resync = setInterval(() => void this.passes.add(JOBS), RESYNC_MS);
    await this.passes.add(JOBS);
  }

  /**
   * Stops looking for jobs. Running ones keep running (as units do): the agent that starts next
   * attaches to their containers again and records their end.
   */
  async close(): Promise<void> {
    clearInterval(this.resync);
    await this.passes.close();
    await this.jobs?.close();
  }

  private async pass(): Promise<void> {
    /** Jobs of this machine whose end this agent did not see: recorded by an agent before it, or by the leader when it counted this machine lost. */
    const endedElsewhere: string[] = [];
    const mine = (this.jobs?.values() ?? []).map((entry) => decodeCached<Job>(entry)).filter((job) => job.machine === this.options.machineId);
    for (const job of mine) {
      const running = this.running.get(job.id);
      if (running) {
        if (job.stopRequestedAt) running.stop('stopped');
        continue;
      }
      if (this.settled.has(job.id)) continue;
      const run = await readJobRun(this.options.store, job.id);
      if (run && finishedJobStates.has(run.state)) {
        endedElsewhere.push(job.id);
        continue;
      }
      this.launch(job);
    }
    await this.removeContainersOf(endedElsewhere);
    for (const id of endedElsewhere) this.settled.add(id);
    const present = new Set(mine.map((job) => job.id));
    for (const id of this.settled) {
      if (present.has(id)) continue;
      this.settled.delete(id);
      this.stdins.forget(id);
    }
  }

  /**
   * Removes what is left of jobs whose end is recorded: a container an earlier agent did not
   * remove, or one still running after the leader counted this machine lost and ended its job (the
   * machine came back): it is stopped, its end is not reported again.
   */
  private async removeContainersOf(ids: readonly string[]): Promise<void> {
    if (ids.length === 0) return;
    const { docker, machineId, log } = this.options;
    const ended = new Set(ids);
    const left = (await docker.listContainers({ all: true, filters: { label: [jobLabels.job, `${jobLabels.machine}=${machineId}`] } })).filter((container) =>
      ended.has(container.Labels[jobLabels.job] ?? ''),
    );
    for (const container of left) {
      log.info({ job: container.Labels[jobLabels.job], machine: machineId }, 'removing the container of a job whose end is recorded');
      await docker.getContainer(container.Id).remove({ force: true }).catch((error: unknown) => log.warn({ reason: dockerErrorMessage(error) }, 'could not remove an ended job\'s container'));
    }
  }

  /**
   * The stdin of this machine's job `id`, for the caller that shows its secret: once the container
   * is attached (it may still be pulled), and to one caller only.
   */
  async stdinOf(id: string, secret: string): Promise<Writable> {
    const job = (this.jobs?.values() ?? []).map((entry) => decodeCached<Job>(entry)).find((candidate) => candidate.id === id);
    if (!job || job.machine !== this.options.machineId) throw notFound(`job ${id} does not run on machine ${this.options.machineId}`);
    if (!job.stdinSecret) throw conflict(`job ${id} was not started with stdin`);
    if (!sameSecret(job.stdinSecret, secret)) throw forbidden(`the stdin of job ${id} is the orchestrator's to attach`);
    if (this.settled.has(id)) throw conflict(`job ${id} has ended`);
    return this.stdins.take(id);
  }

  private launch(job: Job): void {
    let ending: Ending | undefined = job.stopRequestedAt ? 'stopped' : undefined;
    let container: Docker.Container | undefined;
    const stop = (why: Ending): void => {
      if (ending && container === undefined) return;
      ending ??= why;
      void container?.stop({ t: STOP_GRACE_SECONDS }).catch(() => undefined);
    };
    const done = this.runToEnd(job, () => ending, (started) => {
      container = started;
      if (ending) void started.stop({ t: STOP_GRACE_SECONDS }).catch(() => undefined);
    }).finally(() => {
      this.stdins.end(job.id);
      this.running.delete(job.id);
      this.settled.add(job.id);
    });
    this.running.set(job.id, { stop, done });
  }

  /** Runs the job (or attaches to its container, left by an earlier agent) and records how it ended. */
  private async runToEnd(job: Job, ending: () => Ending | undefined, started: (container: Docker.Container) => void): Promise<void> {
    const { store, log } = this.options;
    const output = new JobOutput({ maxLines: JOB_OUTPUT_LINES, maxBytes: JOB_OUTPUT_BYTES });
    const base = { id: job.id, service: job.service, machine: this.options.machineId };
    const record = (run: Omit<JobRun, 'id' | 'service' | 'machine' | 'lines' | 'lineCount' | 'updatedAt'>) =>
      writeJobRun(store, { ...base, ...run, lines: output.lines(), lineCount: output.lineCount(), updatedAt: new Date().toISOString() });
    if (ending()) {
      await record({ state: 'stopped', error: 'stopped before it started', endedAt: new Date().toISOString() });
      return;
    }
    let container: Docker.Container | undefined;
    try {
      await record({ state: 'starting' });
      container = await this.containerOf(job);
      const { ended: streamEnded, stdin } = await this.follow(container, output, job.stdinSecret !== undefined);
      if (stdin) this.stdins.attach(job.id, stdin);
      // Created: this agent made it (or one before it died before starting it). Running or exited: adopted as it is.
      if ((await container.inspect()).State.Status === 'created') await container.start();
      const startedAt = new Date().toISOString();
      started(container);
      await record({ state: 'running', startedAt });
      const remainingMs = Date.parse(job.createdAt) + job.timeoutSeconds * 1000 - Date.now();
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        void container?.stop({ t: STOP_GRACE_SECONDS }).catch(() => undefined);
      }, Math.max(0, remainingMs));
      let written = output.version;
      const writer = setInterval(() => {
        if (output.version === written) return;
        written = output.version;
        void record({ state: 'running', startedAt }).catch(() => undefined);
      }, WRITE_INTERVAL_MS);
      const exit = (await container.wait()) as { StatusCode: number };
      clearTimeout(timer);
      clearInterval(writer);
      // The attached stream carries everything the process wrote; it ends right after the exit.
      await Promise.race([streamEnded, new Promise((resolve) => setTimeout(resolve, 2000))]);
      // What the demultiplexer passed on in the stream's last turn arrives in the next.
      await new Promise((resolve) => setImmediate(resolve));
      output.end();
      const state = timedOut ? 'timed-out' : (ending() ?? 'exited');
      // Ended by the leader, which counted this machine lost (a partition): its record stands.
      const recorded = await readJobRun(store, job.id);
      if (recorded && finishedJobStates.has(recorded.state)) return;
      const endedAt = new Date().toISOString();
      await record({
        state,
        exitCode: exit.StatusCode,
        startedAt,
        endedAt,
        ...(state === 'timed-out' ? { error: `ran longer than its timeout of ${job.timeoutSeconds} s` } : {}),
      });
      await appendJournal(store, {
        service: job.service,
        ...(job.deployment ? { deployment: job.deployment } : {}),
        kind: 'job.ended',
        message: `job ${job.id} (${job.command?.[0] ?? 'its image\'s command'}) of v${job.release} on ${this.options.machineId}${job.caller ? ` for ${job.caller}` : ''}: ${describeEnd(state, exit.StatusCode)}`,
      });
    } catch (error) {
      log.warn({ job: job.id, reason: dockerErrorMessage(error) }, 'job could not run');
      output.end();
      await record({ state: 'failed', error: dockerErrorMessage(error), endedAt: new Date().toISOString() }).catch(() => undefined);
    } finally {
      await container?.remove({ force: true }).catch(() => undefined);
    }
  }

  /**
   * Feeds the container's output into `output` from its start: attached before it starts (as
   * `docker run` is), or with what it wrote so far when an earlier agent started it. `ended`
   * settles when the stream ends (wrapped: an async function would wait for a promise it returns).
   * With `withStdin`, a container not started yet is attached to its stdin too, returned as `stdin`
   * (an adopted one is not: its stdin closed with the agent that attached it).
   */
  private async follow(container: Docker.Container, output: JobOutput, withStdin: boolean): Promise<{ ended: Promise<void>; stdin?: Writable }> {
    const { docker } = this.options;
    const text = new PassThrough();
    text.setEncoding('utf8');
    text.on('data', (chunk: string) => output.push(chunk));
    const status = (await container.inspect()).State.Status;
    // A stopped container cannot be attached to: what it wrote is in its log.
    const stdin = withStdin && status === 'created';
    // Only an adopted running container needs what it wrote so far (`logs`): one not started yet
    // has written nothing, and the engine's switch from the log's replay to the live stream is racy
    // (moby#29285): a release command's two lines came twice in ci21's jobs.test.
    const stream = status === 'exited' || status === 'dead'
      ? await container.logs({ stdout: true, stderr: true, follow: true })
      : await container.attach({ stream: true, stdout: true, stderr: true, logs: status !== 'created', ...(stdin ? { stdin: true, hijack: true } : {}) });
    docker.modem.demuxStream(stream, text, text);
    const ended = new Promise<void>((resolve) => stream.once('end', resolve).once('close', resolve).once('error', () => resolve()));
    // Hijacked, the stream is the engine's connection itself, both ways (dockerode types it one way).
    return stdin ? { ended, stdin: stream as unknown as Writable } : { ended };
  }

  /** The job's container: the one an earlier agent started, else a new one. */
  private async containerOf(job: Job): Promise<Docker.Container> {
    const { docker, machineId } = this.options;
    const found = await docker.listContainers({ all: true, filters: { label: [`${jobLabels.job}=${job.id}`, `${jobLabels.machine}=${machineId}`] } });
    if (found[0]) return docker.getContainer(found[0].Id);
    await ensureImage(docker, job.image, this.options.credentials);
    const mounts = job.volumes?.length ? await unitMounts(docker, { service: job.service, instance: 1, volumes: job.volumes }, machineId) : [];
    const env = { ...job.env, PLATFORM_SERVICE: job.service, PLATFORM_RELEASE: `v${job.release}`, PLATFORM_JOB: job.id };
    return docker.createContainer({
      name: jobContainerName(job),
      Image: job.image,
      Cmd: job.command,
      Env: Object.entries(env).map(([name, value]) => `${name}=${value}`),
      ...(this.options.network === 'host' ? { User: this.options.hostNetworkUser } : {}),
      // Kept open for its caller until it closes it (its stdin is read once: StdinOnce).
      ...(job.stdinSecret ? { OpenStdin: true, StdinOnce: true, AttachStdin: true } : {}),
      Labels: { [jobLabels.job]: job.id, [jobLabels.machine]: machineId, [jobLabels.service]: job.service },
      HostConfig: {
        ...unitConfinement(),
        LogConfig: unitLogConfig(this.options.unitLogs),
        ...unitLimits(job, this.options.defaultMemoryMB),
        ...(mounts.length > 0 ? { Mounts: mounts } : {}),
        NetworkMode: this.options.network,
      },
    });
  }
}

const sameSecret = (expected: string, given: string): boolean => {
  const [a, b] = [Buffer.from(expected), Buffer.from(given)];
  return a.length === b.length && timingSafeEqual(a, b);
};

const describeEnd = (state: string, exitCode: number): string =>
  state === 'exited' ? `exited with code ${exitCode}` : state === 'timed-out' ? `timed out (exit code ${exitCode})` : `stopped (exit code ${exitCode})`;
