import type { FastifyBaseLogger } from 'fastify';
import type { Store, Watch } from '../../store/store.js';
import { assignmentKey, assignmentRoot, servicePrefix, unitStatusRoot } from '../../store/keys.js';
import { listRecords } from '../../store/json-records.js';
import type { Assignment, UnitStatus } from '../../schemas/cluster.js';
import type { DeployReply } from '../../schemas/release.js';
import { RegistryClient, type RegistryClientOptions } from './registry-client.js';
import { acceptDeploy, type DeployTrigger } from './deploy.js';
import { rollOut } from './rollout.js';
import { updateDeployment } from './deployments.js';
import { appendJournal } from './journal.js';

export interface SchedulerOptions {
  store: Store;
  log: FastifyBaseLogger;
  registry?: RegistryClientOptions;
  progressDeadlineSeconds?: number;
  /** How long stopping a service's units may take before the request fails. */
  stopTimeoutSeconds?: number;
}

/** Deploys run one at a time per service, in the order they were accepted. */
class ServiceQueues {
  private readonly tails = new Map<string, Promise<unknown>>();
  run<T>(service: string, task: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(service) ?? Promise.resolve();
    const next = previous.catch(() => undefined).then(task);
    this.tails.set(service, next);
    void next.finally(() => {
      if (this.tails.get(service) === next) this.tails.delete(service);
    }).catch(() => undefined);
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
  private readonly queues = new ServiceQueues();
  private readonly progressDeadlineSeconds: number;
  private readonly stopTimeoutSeconds: number;
  private serviceWatch?: Watch;

  constructor(options: SchedulerOptions) {
    this.store = options.store;
    this.log = options.log;
    this.registry = new RegistryClient(options.registry);
    this.progressDeadlineSeconds = options.progressDeadlineSeconds ?? 120;
    this.stopTimeoutSeconds = options.stopTimeoutSeconds ?? 60;
  }

  async start(): Promise<void> {
    // Level-triggered clean-up: whenever a declaration disappears (by any route), its units go.
    this.serviceWatch = await this.store.watchPrefix(servicePrefix, (event) => {
      if (event.type === 'delete') void this.pruneOrphans().catch((error) => this.log.warn({ err: error }, 'pruning orphaned units failed'));
    });
    await this.pruneOrphans();
  }

  async close(): Promise<void> {
    await this.serviceWatch?.close();
    await this.queues.idle();
  }

  async deploy(trigger: DeployTrigger): Promise<DeployReply> {
    const accepted = await acceptDeploy(this.store, this.registry, trigger);
    void this.queues
      .run(accepted.service.name, () =>
        rollOut({ store: this.store, log: this.log, progressDeadlineSeconds: this.progressDeadlineSeconds }, accepted.service, accepted.release, accepted.deployment),
      )
      .catch(async (error: Error) => {
        this.log.error({ err: error, deployment: accepted.deployment.id }, 'rollout failed');
        await updateDeployment(this.store, accepted.deployment.id, { state: 'failed', reason: error.message, finishedAt: new Date().toISOString() }).catch(() => undefined);
      });
    return accepted.reply;
  }

  /** Removes the service's assignments and waits for its units to stop; returns those still running. */
  stopService(service: string): Promise<string[]> {
    return this.queues.run(service, async () => {
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
    await this.store.txn([], doomed.map((a) => ({ op: 'delete' as const, key: assignmentKey(a.machine, a.unit) })));
  }

  private async pruneOrphans(): Promise<void> {
    const declared = new Set((await this.store.list(servicePrefix)).map((kv) => kv.key.slice(servicePrefix.length)));
    await this.removeAssignments((assignment) => !declared.has(assignment.service));
  }
}
