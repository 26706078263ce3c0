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
import { isInFlight, listDeployments, recordOutcome, recordPhase, recordStop, retryReschedule, serviceDeployments, startDeployment } from '../../../store/records/deployments.js';
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
// resumed. The records of it all are written through src/store/records/deployments.ts.

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
        await cluster.changedSince(seen, deadline - Date.now());
      }
    });
  }

  /** After an election: deployments left in flight are rolled out again from where the cluster stands. */
  async resume(): Promise<void> {
    const { store } = this.options;
    const inFlight = (await listDeployments(store)).filter(isInFlight);
    const newestPerService = new Map<string, Deployment>();
    for (const deployment of inFlight) if (!newestPerService.has(deployment.service)) newestPerService.set(deployment.service, deployment);
    for (const deployment of inFlight) {
      const release = await getRelease(store, deployment.service, deployment.release);
      if (newestPerService.get(deployment.service) !== deployment || !release) {
        await recordOutcome(store, deployment, 'superseded', 'superseded while the scheduler was down');
        continue;
      }
      this.supersedeWith(deployment.service, deployment.id);
      this.schedule(release, deployment);
    }
  }

  /** Work for the service is queued or running: its rollout already converges on the target. */
  busy(service: string): boolean {
    return this.rollouts.busy(service);
  }

  /** Deposed: what this scheduler still runs stops as superseded; the next leader resumes it. */
  forget(): void {
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

  private isCurrent = (deployment: Deployment) => (): boolean => !this.closed && this.options.isLeader() && this.latest.get(deployment.service) === deployment.id;

  /**
   * Queues the deployment's rollout after the service's work under way. `fresh`: it was just
   * accepted (its record is the service's newest, made after every stop this leader recorded)
   * and nothing was queued for the service, so no stop can come before it in the queue.
   */
  private schedule(release: Release, deployment: Deployment, fresh = false): void {
    void this.rollouts.run(release.service, () => this.run(release, deployment, fresh)).finally(() => this.retryDelays.delete(deployment.id)).catch(async (error: Error) => {
      if (error instanceof FencedWriteError || error instanceof NotLeaderError) return; // the new leader carries on
      this.options.log.error({ err: error, deployment: deployment.id }, 'rollout failed');
      await recordOutcome(this.options.store, deployment, 'failed', `scheduler error: ${error.message}`).catch(() => undefined);
    });
  }

  private async run(release: Release, deployment: Deployment, fresh = false): Promise<void> {
    const { store } = this.options;
    if (!this.isCurrent(deployment)()) {
      if (!this.closed) await recordOutcome(store, deployment, 'superseded', 'superseded by a newer deployment before it started');
      return;
    }
    // Work queued behind a stop (a healing check or a deploy that raced it) is older than the stop's
    // record. A fresh deployment had nothing queued before it: the read would only cost its units time.
    if (!fresh && currentTarget(await serviceDeployments(store, this.options.deployments, deployment.service))?.id !== deployment.id) {
      await recordOutcome(store, deployment, 'superseded', 'superseded by a newer deployment or a stop before it started');
      return;
    }
    // Before any unit is replaced: a release command that fails leaves the running units alone.
    const command = await runReleaseCommand({ store, launcher: this.jobs, isCurrent: this.isCurrent(deployment) }, release, deployment);
    if (command.state === 'failed') return void (await recordOutcome(store, deployment, 'failed', command.reason));
    if (command.state === 'superseded') {
      if (!this.closed && this.options.isLeader()) await recordOutcome(store, deployment, 'superseded', 'superseded by a newer deployment during its release command');
      return;
    }
    const outcome = await this.rollOutThroughStoreOutages(release, deployment);
    // Shutting down or deposed: the next leader resumes it from the store.
    if ((this.closed || !this.options.isLeader()) && outcome.state === 'superseded') return;
    if (outcome.state === 'failed') return this.failOrRevert(release, deployment, outcome);
    const reason = outcome.state === 'succeeded' ? `${unitsWanted(release.config)} units run v${release.version}` : (outcome.reason ?? 'superseded by a newer deployment');
    await recordOutcome(store, deployment, outcome.state, reason);
  }

  /**
   * Rolls out; a store error (an etcd member lost, an election in progress) starts the rollout
   * again from the cluster's state after a moment instead of failing the deployment, until its
   * progress deadline. The rollout is level-triggered, so starting again repeats nothing.
   */
  private async rollOutThroughStoreOutages(release: Release, deployment: Deployment): Promise<RolloutOutcome> {
    const { store, log, cluster } = this.options;
    const deadline = Date.now() + rolloutSettings(release.config).progressDeadlineSeconds * 1000;
    // The first phase is written while the rollout places the units, not before: the rollout waits
    // for it before the deployment's next record, so the records still read pending → pulling →
    // rolling, and the units are placed one round trip (a read and a compare-and-swap) sooner.
    let pulling: Promise<void> | undefined;
    for (;;) {
      try {
        const phaseRecorded = (pulling ??= recordPhase(store, deployment, 'pulling'));
        // A failed write is written again when the rollout starts again.
        phaseRecorded.catch(() => {
          if (pulling === phaseRecorded) pulling = undefined;
        });
        // A single-writer service's units are handed over one by one (handover.ts); the others roll.
        const roll = rolloutSettings(release.config).strategy === 'handover' ? handOver : rollOut;
        const outcome = await roll({ store, log, cluster, applier: this.applier, isCurrent: this.isCurrent(deployment), phaseRecorded }, release, deployment);
        await phaseRecorded;
        return outcome;
      } catch (error) {
        if (!(error instanceof StoreUnavailableError) || Date.now() >= deadline || !this.isCurrent(deployment)()) throw error;
        log.warn({ deployment: deployment.id, reason: error.message }, 'store unavailable during a rollout; starting it again');
        await new Promise((resolve) => setTimeout(resolve, STORE_RETRY_MS));
      }
    }
  }

  /** With autoRevert the last succeeded release is deployed again; its units kept serving throughout. */
  private async failOrRevert(release: Release, deployment: Deployment, outcome: Extract<RolloutOutcome, { state: 'failed' }>): Promise<void> {
    const { store } = this.options;
    const previous = currentTarget((await serviceDeployments(store, this.options.deployments, release.service)).filter((d) => d.state === 'succeeded'));
    const good = previous && (await getRelease(store, release.service, previous.release));
    // Reverting to the release that just failed (a reschedule with nowhere to go) would only fail again.
    if (!rolloutSettings(release.config).autoRevert || !good || good.version === release.version || !this.isCurrent(deployment)()) {
      // A failed reschedule is tried again with backoff (one resumed after an election, at the first wait).
      const retryInMs = deployment.trigger === 'reschedule' ? (this.retryDelays.get(deployment.id) ?? defaultBackoff.firstMs) : undefined;
      await recordOutcome(store, deployment, 'failed', outcome.reason, { retryInMs });
      return;
    }
    await recordOutcome(store, deployment, 'reverted', `${outcome.reason}; reverting to v${good.version}`);
    const revert = await startDeployment(store, good, 'revert');
    this.supersedeWith(release.service, revert.id);
    await this.run(good, revert);
  }
}
