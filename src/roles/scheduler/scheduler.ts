import type { FastifyBaseLogger } from 'fastify';
import type { Store, Watch } from '../../store/store.js';
import { assignmentKey, assignmentRoot, servicePrefix, unitStatusRoot } from '../../store/keys.js';
import { listRecords } from '../../store/json-records.js';
import type { Assignment, UnitStatus } from '../../schemas/cluster.js';
import type { Deployment, DeployReply, Release } from '../../schemas/release.js';
import { slotOf } from '../../units.js';
import { RegistryClient, type RegistryClientOptions } from './registry-client.js';
import { acceptDeploy, acceptRollback, currentTarget, startDeployment, type AcceptedDeploy, type DeployTrigger } from './deploy.js';
import { recordOutcome, rollOut, type RolloutOutcome } from './rollout.js';
import { listDeployments, updateDeployment } from './deployments.js';
import { getRelease } from './releases.js';
import { appendJournal } from './journal.js';
import { rolloutSettings } from '../../schemas/service.js';

export interface SchedulerOptions {
  store: Store;
  log: FastifyBaseLogger;
  registry?: RegistryClientOptions;
  /** How long stopping a service's units may take before the request fails. */
  stopTimeoutSeconds?: number;
}

/** Runs tasks one at a time per key, in the order they were queued. */
class KeyedQueue {
  private readonly tails = new Map<string, Promise<unknown>>();
  run<T>(key: string, task: () => Promise<T>): Promise<T> {
    const next = (this.tails.get(key) ?? Promise.resolve()).catch(() => undefined).then(task);
    this.tails.set(key, next);
    void next
      .catch(() => undefined)
      .finally(() => {
        if (this.tails.get(key) === next) this.tails.delete(key);
      });
    return next;
  }
  idle(): Promise<unknown> {
    return Promise.allSettled([...this.tails.values()]);
  }
}

export class Scheduler {
  readonly store: Store;
  private readonly log: FastifyBaseLogger;
  private readonly registry: RegistryClient;
  /** Accepting a trigger (idempotency check + release number) is atomic per service. */
  private readonly accepting = new KeyedQueue();
  /** Rollouts and stops of one service run one after another. */
  private readonly rollouts = new KeyedQueue();
  /** The newest accepted work per service: anything older still running stops as superseded. */
  private readonly latest = new Map<string, string>();
  private readonly stopTimeoutSeconds: number;
  private serviceWatch?: Watch;
  private closed = false;

  constructor(options: SchedulerOptions) {
    this.store = options.store;
    this.log = options.log;
    this.registry = new RegistryClient(options.registry);
    this.stopTimeoutSeconds = options.stopTimeoutSeconds ?? 60;
  }

  async start(): Promise<void> {
    // Level-triggered clean-up: whenever a declaration disappears (by any route), its units go.
    this.serviceWatch = await this.store.watchPrefix(servicePrefix, (event) => {
      if (event.type === 'delete') void this.pruneOrphans().catch((error) => this.log.warn({ err: error }, 'pruning orphaned units failed'));
    });
    await this.pruneOrphans();
    await this.resumeUnfinished();
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.serviceWatch?.close();
    await this.rollouts.idle();
  }

  deploy(trigger: DeployTrigger): Promise<DeployReply> {
    return this.accept(trigger.serviceName, () => acceptDeploy(this.store, this.registry, trigger));
  }

  rollback(service: string, version: number): Promise<DeployReply> {
    return this.accept(service, () => acceptRollback(this.store, service, version));
  }

  private async accept(service: string, decide: () => Promise<AcceptedDeploy>): Promise<DeployReply> {
    const accepted = await this.accepting.run(service, async () => {
      const result = await decide();
      if (result.deployment) this.latest.set(service, result.deployment.id);
      return result;
    });
    if (accepted.release && accepted.deployment) this.schedule(accepted.release, accepted.deployment);
    return accepted.reply;
  }

  private schedule(release: Release, deployment: Deployment): void {
    void this.rollouts.run(release.service, () => this.runDeployment(release, deployment)).catch(async (error: Error) => {
      this.log.error({ err: error, deployment: deployment.id }, 'rollout failed');
      await recordOutcome(this.store, deployment, 'failed', `scheduler error: ${error.message}`).catch(() => undefined);
    });
  }

  private isCurrent = (deployment: Deployment) => () => !this.closed && this.latest.get(deployment.service) === deployment.id;

  private async runDeployment(release: Release, deployment: Deployment): Promise<void> {
    if (!this.isCurrent(deployment)()) {
      if (!this.closed) await recordOutcome(this.store, deployment, 'superseded', 'superseded by a newer deployment before it started');
      return;
    }
    await updateDeployment(this.store, deployment.id, { state: 'pulling' });
    const outcome = await rollOut({ store: this.store, log: this.log, isCurrent: this.isCurrent(deployment) }, release, deployment);
    if (this.closed && outcome.state === 'superseded') return; // shutting down: the next scheduler resumes it
    if (outcome.state !== 'failed') {
      await recordOutcome(this.store, deployment, outcome.state, outcome.state === 'succeeded' ? `${release.config.numInstances} units run v${release.version}` : 'superseded by a newer deployment');
      return;
    }
    await this.failOrRevert(release, deployment, outcome);
  }

  /** With autoRevert the last succeeded release is deployed again; its units kept serving throughout. */
  private async failOrRevert(release: Release, deployment: Deployment, outcome: Extract<RolloutOutcome, { state: 'failed' }>): Promise<void> {
    const previous = currentTarget((await listDeployments(this.store, release.service)).filter((d) => d.state === 'succeeded'));
    const good = previous && (await getRelease(this.store, release.service, previous.release));
    if (!rolloutSettings(release.config).autoRevert || !good || !this.isCurrent(deployment)()) {
      await recordOutcome(this.store, deployment, 'failed', outcome.reason);
      return;
    }
    await recordOutcome(this.store, deployment, 'reverted', `${outcome.reason}; reverting to v${good.version}`);
    const revert = await startDeployment(this.store, good, 'revert');
    this.latest.set(release.service, revert.id);
    await this.runDeployment(good, revert);
  }

  /** After a scheduler restart: deployments left in flight are rolled out again from where the cluster stands. */
  private async resumeUnfinished(): Promise<void> {
    const inFlight = (await listDeployments(this.store)).filter((d) => d.state === 'pending' || d.state === 'pulling' || d.state === 'rolling');
    const newestPerService = new Map<string, Deployment>();
    for (const deployment of inFlight) if (!newestPerService.has(deployment.service)) newestPerService.set(deployment.service, deployment);
    for (const deployment of inFlight) {
      const release = await getRelease(this.store, deployment.service, deployment.release);
      if (newestPerService.get(deployment.service) !== deployment || !release) {
        await recordOutcome(this.store, deployment, 'superseded', 'superseded while the scheduler was down');
        continue;
      }
      this.latest.set(deployment.service, deployment.id);
      this.schedule(release, deployment);
    }
  }

  /** Removes the service's assignments and waits for its units to stop; returns those still running. */
  stopService(service: string): Promise<string[]> {
    this.latest.set(service, `stop-${Date.now()}`);
    return this.rollouts.run(service, async () => {
      await this.removeAssignments((assignment) => assignment.service === service);
      await appendJournal(this.store, { service, kind: 'service.stopped', message: `units of ${service} stopped` });
      const deadline = Date.now() + this.stopTimeoutSeconds * 1000;
      for (;;) {
        const left = (await listRecords<UnitStatus>(this.store, unitStatusRoot)).filter((status) => status.service === service);
        if (left.length === 0 || Date.now() > deadline) return left.map((status) => `${status.unit} on ${status.machine}`);
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    });
  }

  private async removeAssignments(matches: (assignment: Assignment) => boolean): Promise<void> {
    const doomed = (await listRecords<Assignment>(this.store, assignmentRoot)).filter(matches);
    if (doomed.length === 0) return;
    await this.store.txn([], doomed.map((a) => ({ op: 'delete' as const, key: assignmentKey(a.machine, slotOf(a)) })));
  }

  private async pruneOrphans(): Promise<void> {
    const declared = new Set((await this.store.list(servicePrefix)).map((kv) => kv.key.slice(servicePrefix.length)));
    await this.removeAssignments((assignment) => !declared.has(assignment.service));
  }
}
