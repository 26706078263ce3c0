import type { FastifyBaseLogger } from 'fastify';
import { StoreUnavailableError, type Store } from '../../../store/store.js';
import { assignmentDelete } from '../../../store/records/assignments.js';
import { FencedWriteError } from '../../../store/fenced-store.js';
import { currentTarget, type Deployment, type DeployReply, type Release } from '../../../schemas/release.js';
import { rolloutSettings, unitsWanted } from '../../../schemas/service.js';
import { NotLeaderError } from '../leadership.js';
import { acceptDeploy, acceptRollback, type AcceptedDeploy, type DeployTrigger } from './deploy.js';
import type { RegistryClient } from './registry-client.js';
import { getRelease } from '../../../store/records/releases.js';
import { getDeployment, isInFlight, listDeployments, recordOutcome, recordPhase, recordStop, retryReschedule, serviceDeployments, startDeployment } from '../../../store/records/deployments.js';
import type { PrefixCache } from '../../../store/prefix-cache.js';
import { defaultBackoff } from '../healing/healing-backoff.js';
import { rollOut, type RolloutOutcome } from './rollout.js';
import { handOver } from './handover.js';
import { PlanApplier } from './plan-applier.js';
import { JobLauncher } from './jobs.js';
import { runReleaseCommand } from './release-command.js';
import type { ClusterWatch } from '../cluster-snapshot.js';
import { KeyedQueue } from '../../../keyed-queue.js';

// The leader's deployment work, per service: accepting triggers one at a time, running the
// accepted deployments (and stops) one after another, and the rules between them. The newest
// accepted work of a service supersedes anything older still queued or rolling out; a failed
// deployment reverts to the last good release; deployments a previous leader left in flight are
// resumed, and so is one in flight that nothing runs (a takeover that failed part-way, an outcome
// the store refused), found by the heal pass. The records of it all are written through
// src/store/records/deployments.ts.

/** How long a rollout waits before it starts again after a store error. */
const STORE_RETRY_MS = 500;

export interface RunnerOptions {
  /** The leader-fenced store. */
  store: Store;
  log: FastifyBaseLogger;
  cluster: ClusterWatch;
  /** The watched copy of the deployment records (records/deployments.ts: watchDeployments): a service's are read from it. */
  deployments: PrefixCache;
  /** Pins a trigger's tag to its digest. */
  registry: RegistryClient;
  isLeader: () => boolean;
  /** How long stopping a service's units may take before the stop reports what still runs. */
  stopTimeoutSeconds: number;
}

// Per service, work here is queued in order on KeyedQueue, not folded on the WorkQueue the reacting
// loops use (src/work-queue.ts): each item is a distinct deploy, rollback or stop with its own
// record and caller waiting for its own answer, so two of them are never one; a newer one
// supersedes an older one (it ends `superseded`, recorded), which folding would lose.
export class DeploymentRunner {
  /** Accepting a trigger (staleness, idempotency, release number) is atomic per service. */
  private readonly accepting = new KeyedQueue();
  /** Rollouts and stops of one service run one after another. */
  private readonly rollouts = new KeyedQueue();
  /** The newest accepted work per service: anything older still running stops as superseded. */
  private readonly latest = new Map<string, string>();
  /** Per reschedule: how long healing waits before it tries again should it fail (healing-backoff.ts). */
  private readonly retryDelays = new Map<string, number>();
  /**
   * The leadership this runner works for, counted up when it is lost: a rollout stops once its
   * term has ended (even when this scheduler leads again by the time it looks) and records
   * nothing, since the next term resumes the deployment from its record.
   */
  private term = 0;
  /** Ids of the deployments queued or rolling out here: one is never queued twice. */
  private readonly scheduled = new Set<string>();
  private closed = false;
  /** Every rollout's placements are checked and committed through it, one plan at a time. */
  private readonly applier: PlanApplier;
  /** Jobs are placed through the same applier: one-off jobs, and the release commands run here. */
  readonly jobs: JobLauncher;

  constructor(private readonly options: RunnerOptions) {
    this.applier = new PlanApplier(options.store, options.cluster, options.log);
    this.jobs = new JobLauncher(options.store, options.cluster, this.applier);
  }

  /** Accepts a deploy trigger (deploy.ts) and rolls out the release it records. */
  deploy(trigger: DeployTrigger): Promise<DeployReply> {
    return this.accept(trigger.serviceName, () => acceptDeploy(this.options, this.options.registry, trigger));
  }

  /** Accepts a rollback to an earlier release (deploy.ts) and rolls out the release it records. */
  rollback(service: string, version: number, runReleaseCommand = false): Promise<DeployReply> {
    return this.accept(service, () => acceptRollback(this.options, service, version, runReleaseCommand));
  }

  /** Accepts a trigger with `decide` (one at a time per service) and schedules what it created. */
  private async accept(service: string, decide: () => Promise<AcceptedDeploy>): Promise<DeployReply> {
    const accepted = await this.accepting.run(service, async () => {
      const result = await decide();
      if (result.deployment) this.supersedeWith(service, result.deployment.id);
      return result;
    });
    // Nothing queued before it (no stop whose record it must yield to): run() need not look for one.
    if (accepted.release && accepted.deployment) this.schedule(accepted.release, accepted.deployment, !this.rollouts.busy(service));
    return accepted.reply;
  }

  /**
   * Deploys the service's current release again, to place units that went missing (healing): a
   * new reschedule, or again the failed one of an episode. Should it fail, healing tries it again
   * after `retryDelayMs`.
   */
  async reschedule(release: Release, why: string, retry: { episode?: Deployment; retryDelayMs: number }): Promise<void> {
    const deployment = retry.episode ? await retryReschedule(this.options.store, retry.episode, why) : await startDeployment(this.options.store, release, 'reschedule', { why });
    if (!deployment) return; // the episode's record was deleted meanwhile: the next check starts anew
    this.retryDelays.set(deployment.id, retry.retryDelayMs);
    this.supersedeWith(release.service, deployment.id);
    this.schedule(release, deployment);
  }

  /** Removes the service's assignments and waits for its units to stop; returns those still running. */
  stop(service: string): Promise<string[]> {
    const { store, cluster, stopTimeoutSeconds } = this.options;
    this.supersedeWith(service, `stop-${Date.now()}`);
    return this.rollouts.run(service, async () => {
      const doomed = cluster.snapshot().assignments.filter((a) => a.service === service);
      if (doomed.length > 0) await store.txn([], doomed.map(assignmentDelete));
      await recordStop(store, this.options.deployments, service);
      const deadline = Date.now() + stopTimeoutSeconds * 1000;
      for (;;) {
        const seen = cluster.now();
        const left = cluster.statuses().filter((status) => status.service === service);
        if (left.length === 0 || Date.now() > deadline) return left.map((status) => `${status.unit} on ${status.machine}`);
        await cluster.changedSince(seen, deadline - Date.now(), service);
      }
    });
  }

  /**
   * After an election: deployments left in flight are rolled out again from where the cluster
   * stands. A rollout of the last term still winding down keeps its place in the queue, and the
   * resumed one runs after it.
   */
  async resume(): Promise<void> {
    const listed = await listDeployments(this.options.store);
    for (const deployment of listed.filter(isInFlight)) await this.carryOn(deployment, listed);
  }

  /**
   * At each heal pass (`listed` newest first): deployments in flight of services with no work
   * here have no rollout (a takeover whose reads failed part-way, an outcome the store refused
   * to record) and would stay in flight for ever, since healing leaves a service alone while its
   * deployment is in flight. They are carried on as after an election. `listed` may be older than
   * this runner's work, so the record is read again once the service is idle: a rollout records
   * its outcome before it leaves the queue.
   */
  async resumeOrphans(listed: readonly Deployment[]): Promise<void> {
    for (const deployment of listed.filter(isInFlight)) {
      if (this.busy(deployment.service)) continue;
      const current = await getDeployment(this.options.store, deployment.id);
      if (!current || !isInFlight(current) || this.busy(deployment.service)) continue;
      this.options.log.warn({ deployment: current.id, service: current.service, state: current.state }, 'a deployment in flight had no rollout; carrying it on');
      await this.carryOn(current, listed);
    }
  }

  /**
   * Rolls out an in-flight deployment again if it is its service's newest record (`listed`:
   * every deployment, newest first); one after which came another deployment or a stop ends superseded.
   */
  private async carryOn(deployment: Deployment, listed: readonly Deployment[]): Promise<void> {
    const { store } = this.options;
    const newest = listed.find((d) => d.service === deployment.service);
    const release = newest?.id === deployment.id ? await getRelease(store, deployment.service, deployment.release) : undefined;
    if (!release) {
      await recordOutcome(store, deployment, 'superseded', 'superseded while the scheduler was down');
      return;
    }
    this.supersedeWith(deployment.service, deployment.id);
    this.schedule(release, deployment);
  }

  /** Work for the service is being accepted, queued or running: its rollout already converges on the target. */
  busy(service: string): boolean {
    return this.accepting.busy(service) || this.rollouts.busy(service);
  }

  /** Deposed: what this scheduler still runs stops and records nothing; the next leader resumes it. */
  forget(): void {
    this.term++;
    this.latest.clear();
    this.options.cluster.poke();
  }

  async close(): Promise<void> {
    this.closed = true;
    this.options.cluster.poke();
    await this.rollouts.idle();
  }

  /** `id` is now the service's newest work: a rollout of anything older wakes up and stops. */
  private supersedeWith(service: string, id: string): void {
    this.latest.set(service, id);
    this.options.cluster.poke();
  }

  /** Whether the deployment is still its service's newest work, in the leadership term `term`. */
  private isCurrent =
    (deployment: Deployment, term: number) =>
    (): boolean =>
      !this.closed && this.term === term && this.options.isLeader() && this.latest.get(deployment.service) === deployment.id;

  /**
   * Queues the deployment's rollout after the service's work under way. `fresh`: it was just
   * accepted (its record is the service's newest, made after every stop this leader recorded)
   * and nothing was queued for the service, so no stop can come before it in the queue.
   */
  private schedule(release: Release, deployment: Deployment, fresh = false): void {
    if (this.scheduled.has(deployment.id)) return;
    this.scheduled.add(deployment.id);
    const term = this.term;
    // The outcome of a rollout that threw is recorded inside the queue too: the service counts as
    // busy until it is, so the heal pass never takes the deployment for one without a rollout.
    // A store error on the way (a read before the rollout, a record after it; the rollout's own
    // are retried inside it) starts it again, as after an election, until its progress deadline:
    // a takeover right after etcd stalled met the client's open circuit breaker and failed the
    // deployment it was resuming.
    void this.rollouts
      .run(release.service, () => {
        // Counted from when its turn comes (it may wait behind the service's earlier work), as the rollout's own is.
        const deadline = Date.now() + rolloutSettings(release.config).progressDeadlineSeconds * 1000;
        let attempts = 0;
        const attempt = () => this.run(release, deployment, term, fresh && attempts++ === 0);
        return this.throughStoreOutages(deployment, deadline, this.isCurrent(deployment, term), 'store unavailable while a deployment ran; starting it again', attempt).catch(async (error: Error) => {
          if (error instanceof FencedWriteError || error instanceof NotLeaderError) return; // the new leader carries on
          this.options.log.error({ err: error, deployment: deployment.id }, 'rollout failed');
          await recordOutcome(this.options.store, deployment, 'failed', `scheduler error: ${error.message}`).catch(() => undefined);
        });
      })
      .finally(() => {
        this.retryDelays.delete(deployment.id);
        this.scheduled.delete(deployment.id);
      });
  }

  private async run(release: Release, deployment: Deployment, term: number, fresh = false): Promise<void> {
    const { store } = this.options;
    const isCurrent = this.isCurrent(deployment, term);
    const termEnded = () => this.closed || this.term !== term;
    if (!isCurrent()) {
      if (!termEnded()) await recordOutcome(store, deployment, 'superseded', 'superseded by a newer deployment before it started');
      return;
    }
    // Work queued behind a stop (a healing check or a deploy that raced it) is older than the stop's
    // record. A fresh deployment had nothing queued before it: the read would only cost its units time.
    if (!fresh && currentTarget(await serviceDeployments(store, this.options.deployments, deployment.service))?.id !== deployment.id) {
      await recordOutcome(store, deployment, 'superseded', 'superseded by a newer deployment or a stop before it started');
      return;
    }
    // Before any unit is replaced: a release command that fails leaves the running units alone.
    const command = await runReleaseCommand({ store, launcher: this.jobs, isCurrent }, release, deployment);
    if (command.state === 'failed') return void (await recordOutcome(store, deployment, 'failed', command.reason));
    if (command.state === 'superseded') {
      if (!termEnded()) await recordOutcome(store, deployment, 'superseded', 'superseded by a newer deployment during its release command');
      return;
    }
    const outcome = await this.rollOutThroughStoreOutages(release, deployment, isCurrent);
    // Shutting down or deposed (even if elected again since): the next term resumes it from the store.
    if (termEnded() && outcome.state === 'superseded') return;
    if (outcome.state === 'failed') return this.failOrRevert(release, deployment, outcome, term);
    const reason = outcome.state === 'succeeded' ? `${unitsWanted(release.config)} units run v${release.version}` : (outcome.reason ?? 'superseded by a newer deployment');
    await recordOutcome(store, deployment, outcome.state, reason);
  }

  /**
   * Rolls out; a store error (an etcd member lost, an election in progress) starts the rollout
   * again from the cluster's state after a moment instead of failing the deployment, until its
   * progress deadline. The rollout is level-triggered, so starting again repeats nothing.
   */
  private async rollOutThroughStoreOutages(release: Release, deployment: Deployment, isCurrent: () => boolean): Promise<RolloutOutcome> {
    const { store, log, cluster } = this.options;
    const deadline = Date.now() + rolloutSettings(release.config).progressDeadlineSeconds * 1000;
    // The first phase is written while the rollout places the units, not before: the rollout waits
    // for it before the deployment's next record, so the records still read pending → pulling →
    // rolling, and the units are placed one round trip (a read and a compare-and-swap) sooner.
    let pulling: Promise<void> | undefined;
    return this.throughStoreOutages(deployment, deadline, isCurrent, 'store unavailable during a rollout; starting it again', async () => {
      const phaseRecorded = (pulling ??= recordPhase(store, deployment, 'pulling'));
      // A failed write is written again when the rollout starts again.
      phaseRecorded.catch(() => {
        if (pulling === phaseRecorded) pulling = undefined;
      });
      // A single-writer service's units are handed over one by one (handover.ts); the others roll.
      const roll = rolloutSettings(release.config).strategy === 'handover' ? handOver : rollOut;
      const outcome = await roll({ store, log, cluster, applier: this.applier, isCurrent, phaseRecorded }, release, deployment);
      await phaseRecorded;
      return outcome;
    });
  }

  /** Runs `attempt`, and again STORE_RETRY_MS after each store error, while the deployment is current and before `deadline`. */
  private async throughStoreOutages<T>(deployment: Deployment, deadline: number, isCurrent: () => boolean, what: string, attempt: () => Promise<T>): Promise<T> {
    for (;;) {
      try {
        return await attempt();
      } catch (error) {
        if (!(error instanceof StoreUnavailableError) || Date.now() >= deadline || !isCurrent()) throw error;
        this.options.log.warn({ deployment: deployment.id, reason: error.message }, what);
        await new Promise((resolve) => setTimeout(resolve, STORE_RETRY_MS));
      }
    }
  }

  /** With autoRevert the last succeeded release is deployed again; its units kept serving throughout. */
  private async failOrRevert(release: Release, deployment: Deployment, outcome: Extract<RolloutOutcome, { state: 'failed' }>, term: number): Promise<void> {
    const { store } = this.options;
    const previous = currentTarget((await serviceDeployments(store, this.options.deployments, release.service)).filter((d) => d.state === 'succeeded'));
    const good = previous && (await getRelease(store, release.service, previous.release));
    // Reverting to the release that just failed (a reschedule with nowhere to go) would only fail again.
    if (!rolloutSettings(release.config).autoRevert || !good || good.version === release.version || !this.isCurrent(deployment, term)()) {
      // A failed reschedule is tried again with backoff (one resumed after an election, at the first wait).
      const retryInMs = deployment.trigger === 'reschedule' ? (this.retryDelays.get(deployment.id) ?? defaultBackoff.firstMs) : undefined;
      await recordOutcome(store, deployment, 'failed', outcome.reason, { retryInMs });
      return;
    }
    await recordOutcome(store, deployment, 'reverted', `${outcome.reason}; reverting to v${good.version}`);
    const revert = await startDeployment(store, good, 'revert');
    this.supersedeWith(release.service, revert.id);
    await this.run(good, revert, term);
  }
}
