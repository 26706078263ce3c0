import type { FastifyBaseLogger } from 'fastify';
import type { Store, Watch } from '../../store/store.js';
import { assignmentKey, assignmentRoot, deploymentKey, deploymentPrefix, journalPrefix, lastSegment, machineDrainPrefix, machinePrefix, servicePrefix, unitStatusRoot } from '../../store/keys.js';
import { FencedStore, FencedWriteError } from '../../store/fenced-store.js';
import { HttpError } from '../../http/errors.js';
import { HandOff, type LeaderReply, type LeaderRequest } from './handoff.js';
import { Leadership, NotLeaderError } from './leadership.js';
import { listRecords } from '../../store/json-records.js';
import type { Assignment, Machine, UnitStatus } from '../../schemas/cluster.js';
import { currentTarget, type Deployment, type DeployReply, type Release } from '../../schemas/release.js';
import { slotOf } from '../../units.js';
import { RegistryClient, type RegistryClientOptions } from './registry-client.js';
import { acceptDeploy, acceptRollback, startDeployment, type AcceptedDeploy, type DeployTrigger } from './deploy.js';
import { recordOutcome, rollOut, type RolloutOutcome } from './rollout.js';
import { listDeployments, newDeploymentId, saveNewDeployment, updateDeployment } from './deployments.js';
import { idTime, sortAfter } from './ids.js';
import { getRelease } from './releases.js';
import { appendJournal } from './journal.js';
import { rolloutSettings } from '../../schemas/service.js';
import { readDrainedMachines } from './cluster-snapshot.js';
import { expiredDeployments, expiredJournalKeys } from './retention.js';
import { defaultRetention, type RetentionLimits } from '../../config.js';

export interface SchedulerOptions {
  store: Store;
  log: FastifyBaseLogger;
  /** This scheduler's id and address, for the leader key and its announcement. */
  id: string;
  address: string;
  /** TTL of the leadership lease: a dead leader is replaced within it. */
  leaseTtlSeconds: number;
  registry?: RegistryClientOptions;
  /** How long stopping a service's units may take before the request fails. */
  stopTimeoutSeconds?: number;
  /** How much deployment and journal history the leader keeps. */
  retention?: RetentionLimits;
}

/** How long a follower waits for the leader to answer work it handed over. */
const HANDOFF_TIMEOUT_MS = 30_000;

/** How often the leader checks every service for units lost with their machine. */
const HEAL_INTERVAL_MS = 10_000;

/** How often the leader deletes history beyond the retention limits. */
const PRUNE_INTERVAL_MS = 60_000;

/** Deletes per store transaction (etcd allows 128 operations in one by default). */
const DELETE_BATCH = 100;

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
  /** Work for `key` is queued or running (a deployment accepted and not finished). */
  busy(key: string): boolean {
    return this.tails.has(key);
  }
}

export class Scheduler {
  /** The store as the leader writes it: every write is fenced on the leadership. Reads pass through. */
  readonly store: Store;
  private readonly log: FastifyBaseLogger;
  private readonly leadership: Leadership;
  private readonly handOff: HandOff;
  private machineWatch?: Watch;
  private drainWatch?: Watch;
  private healTimer?: NodeJS.Timeout;
  private pruneTimer?: NodeJS.Timeout;
  private readonly retention: RetentionLimits;
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
  private healing = false;
  private pruning = false;

  constructor(options: SchedulerOptions) {
    this.log = options.log;
    this.leadership = new Leadership(options.store, {
      id: options.id,
      address: options.address,
      ttlSeconds: options.leaseTtlSeconds,
      log: options.log,
      events: { elected: () => void this.lead(), deposed: () => this.latest.clear() },
    });
    this.store = new FencedStore(options.store, () => this.leadership.fence());
    this.handOff = new HandOff(options.store, options.log);
    this.registry = new RegistryClient(options.registry);
    this.stopTimeoutSeconds = options.stopTimeoutSeconds ?? 60;
    this.retention = options.retention ?? defaultRetention;
  }

  async start(): Promise<void> {
    // Level-triggered clean-up: whenever a declaration disappears (by any route), its units go.
    this.serviceWatch = await this.store.watchPrefix(servicePrefix, (event) => {
      if (event.type === 'delete' && this.isLeader()) void this.pruneOrphans().catch((error) => this.log.warn({ err: error }, 'pruning orphaned units failed'));
    });
    // A machine whose lease expired takes its units with it: place them elsewhere at once.
    this.machineWatch = await this.store.watchPrefix(machinePrefix, (event) => {
      if (event.type === 'delete' && this.isLeader()) void this.heal();
    });
    // A machine an operator starts draining: move its units away now, not at the next check.
    this.drainWatch = await this.store.watchPrefix(machineDrainPrefix, (event) => {
      if (event.type === 'put' && this.isLeader()) void this.heal();
    });
    this.healTimer = setInterval(() => void (this.isLeader() && this.heal()), HEAL_INTERVAL_MS);
    this.pruneTimer = setInterval(() => void (this.isLeader() && this.pruneHistory()), PRUNE_INTERVAL_MS);
    await this.leadership.start();
  }

  isLeader(): boolean {
    return this.leadership.isLeader();
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.healTimer);
    clearInterval(this.pruneTimer);
    await Promise.all([this.serviceWatch?.close(), this.machineWatch?.close(), this.drainWatch?.close(), this.handOff.close()]);
    await this.leadership.close();
    await this.rollouts.idle();
  }

  /** On election: answer handed-off requests, clean up, and carry on what the last leader left. */
  private async lead(): Promise<void> {
    try {
      // First, before any record is made: ids from here on sort after the last leader's.
      for (const prefix of [deploymentPrefix, journalPrefix]) {
        const newest = (await this.store.list(prefix)).map((kv) => lastSegment(kv.key)).findLast((id) => idTime(id) !== undefined);
        if (newest) sortAfter(newest);
      }
      await this.handOff.serve((request) => this.execute(request), () => this.isLeader());
      await this.pruneOrphans();
      await this.resumeUnfinished();
      await this.heal();
      await this.pruneHistory();
    } catch (error) {
      this.log.warn({ err: error }, 'taking over as leader failed part-way; the next event retries');
    }
  }

  private async execute(request: LeaderRequest): Promise<LeaderReply> {
    try {
      if (request.kind === 'deploy') return { status: 200, body: await this.deploy(request.trigger) };
      if (request.kind === 'rollback') return { status: 200, body: await this.rollback(request.service, request.version) };
      const remaining = await this.stopService(request.service);
      return { status: 200, body: remaining };
    } catch (error) {
      const status = error instanceof HttpError ? error.statusCode : 500;
      return { status, body: { message: (error as Error).message } };
    }
  }

  /** Deploys, here when this scheduler leads, else through the leader. */
  async deploy(trigger: DeployTrigger): Promise<DeployReply> {
    if (!this.isLeader()) return (await this.handOff.send({ kind: 'deploy', trigger }, HANDOFF_TIMEOUT_MS)) as DeployReply;
    return this.accept(trigger.serviceName, () => acceptDeploy(this.store, this.registry, trigger));
  }

  async rollback(service: string, version: number): Promise<DeployReply> {
    if (!this.isLeader()) return (await this.handOff.send({ kind: 'rollback', service, version }, HANDOFF_TIMEOUT_MS)) as DeployReply;
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
      if (error instanceof FencedWriteError || error instanceof NotLeaderError) return; // the new leader carries on
      this.log.error({ err: error, deployment: deployment.id }, 'rollout failed');
      await recordOutcome(this.store, deployment, 'failed', `scheduler error: ${error.message}`).catch(() => undefined);
    });
  }

  private isCurrent = (deployment: Deployment) => () => !this.closed && this.isLeader() && this.latest.get(deployment.service) === deployment.id;

  private async runDeployment(release: Release, deployment: Deployment): Promise<void> {
    if (!this.isCurrent(deployment)()) {
      if (!this.closed) await recordOutcome(this.store, deployment, 'superseded', 'superseded by a newer deployment before it started');
      return;
    }
    // Work queued behind a stop (a healing check or a deploy that raced it) is older than the stop's record.
    if (currentTarget(await listDeployments(this.store, deployment.service))?.id !== deployment.id) {
      await recordOutcome(this.store, deployment, 'superseded', 'superseded by a newer deployment or a stop before it started');
      return;
    }
    await updateDeployment(this.store, deployment.id, { state: 'pulling' });
    const outcome = await rollOut({ store: this.store, log: this.log, isCurrent: this.isCurrent(deployment) }, release, deployment);
    // Shutting down or deposed: the next leader resumes it from the store.
    if ((this.closed || !this.isLeader()) && outcome.state === 'superseded') return;
    if (outcome.state !== 'failed') {
      await recordOutcome(this.store, deployment, outcome.state, outcome.state === 'succeeded' ? `${release.config.numInstances} units run v${release.version}` : (outcome.reason ?? 'superseded by a newer deployment'));
      return;
    }
    await this.failOrRevert(release, deployment, outcome);
  }

  /** With autoRevert the last succeeded release is deployed again; its units kept serving throughout. */
  private async failOrRevert(release: Release, deployment: Deployment, outcome: Extract<RolloutOutcome, { state: 'failed' }>): Promise<void> {
    const previous = currentTarget((await listDeployments(this.store, release.service)).filter((d) => d.state === 'succeeded'));
    const good = previous && (await getRelease(this.store, release.service, previous.release));
    // Reverting to the release that just failed (a reschedule with nowhere to go) would only fail again.
    if (!rolloutSettings(release.config).autoRevert || !good || good.version === release.version || !this.isCurrent(deployment)()) {
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
  async stopService(service: string): Promise<string[]> {
    if (!this.isLeader()) return (await this.handOff.send({ kind: 'stop', service }, this.stopTimeoutSeconds * 1000 + 10_000)) as string[];
    this.latest.set(service, `stop-${Date.now()}`);
    return this.rollouts.run(service, async () => {
      await this.removeAssignments((assignment) => assignment.service === service);
      await this.recordStop(service);
      await appendJournal(this.store, { service, kind: 'service.stopped', message: `units of ${service} stopped` });
      const deadline = Date.now() + this.stopTimeoutSeconds * 1000;
      for (;;) {
        const left = (await listRecords<UnitStatus>(this.store, unitStatusRoot)).filter((status) => status.service === service);
        if (left.length === 0 || Date.now() > deadline) return left.map((status) => `${status.unit} on ${status.machine}`);
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    });
  }

  /**
   * Records the stop as the service's newest deployment (trigger `stop`), so the deployment it
   * ran before no longer counts as current: self-healing leaves the service alone, and a later
   * deploy of the same image is not taken for "unchanged". Earlier records stay as they were.
   */
  private async recordStop(service: string): Promise<void> {
    const deployments = await listDeployments(this.store, service);
    if (!currentTarget(deployments)) return; // nothing would place its units again
    const now = new Date().toISOString();
    // What was stopped: the newest deployment, even one the stop superseded part-way.
    const { release, image } = deployments[0]!;
    await saveNewDeployment(this.store, { id: newDeploymentId(), service, release, image, state: 'succeeded', trigger: 'stop', units: [], createdAt: now, updatedAt: now, finishedAt: now });
  }

  /**
   * Self-healing: a service whose deployment succeeded but whose units are no longer all in place
   * (a machine died with some, an instance lost its assignment) gets a deployment of the same
   * release, which places the missing units. So does a service with units on a machine being
   * drained: the rollout starts their replacements elsewhere before it retires them. Only structure
   * counts here, not health: a unit that crashes is restarted by its agent, not moved.
   */
  private async heal(): Promise<void> {
    if (this.healing) return;
    this.healing = true;
    try {
      const [machines, assignments, deployments, drained, declared] = await Promise.all([
        listRecords<Machine>(this.store, machinePrefix),
        listRecords<Assignment>(this.store, assignmentRoot),
        listDeployments(this.store),
        readDrainedMachines(this.store),
        this.declaredServices(),
      ]);
      const alive = new Set(machines.map((machine) => machine.id));
      // A service deleted by any route keeps its deployment records, not its units.
      const services = new Set(deployments.map((d) => d.service).filter((service) => declared.has(service)));
      for (const service of services) {
        const target = currentTarget(deployments.filter((d) => d.service === service));
        if (!target || target.state !== 'succeeded' || this.rollouts.busy(service)) continue;
        const release = await getRelease(this.store, service, target.release);
        if (!release) continue;
        const own = assignments.filter((a) => a.service === service && alive.has(a.machine));
        const instances = new Set(own.map((a) => a.instance));
        const lost = assignments.filter((a) => a.service === service && !alive.has(a.machine)).map((a) => `${a.unit} on ${a.machine}`);
        const evicted = own.filter((a) => drained.has(a.machine)).map((a) => `${a.unit} off ${a.machine}`);
        if (own.length === release.config.numInstances && instances.size === release.config.numInstances && evicted.length === 0) continue;
        const deployment = await startDeployment(this.store, release, 'reschedule');
        const why = lost.length ? `machine lost: moving ${lost.join(', ')}` : evicted.length ? `machine drained: moving ${evicted.join(', ')}` : 'units missing: placing them again';
        await appendJournal(this.store, { service, deployment: deployment.id, kind: 'service.rescheduled', message: why });
        this.latest.set(service, deployment.id);
        this.schedule(release, deployment);
      }
    } catch (error) {
      if (!(error instanceof FencedWriteError || error instanceof NotLeaderError)) this.log.warn({ err: error }, 'healing failed; retrying at the next check');
    } finally {
      this.healing = false;
    }
  }

  private async removeAssignments(matches: (assignment: Assignment) => boolean): Promise<void> {
    const doomed = (await listRecords<Assignment>(this.store, assignmentRoot)).filter(matches);
    if (doomed.length === 0) return;
    await this.store.txn([], doomed.map((a) => ({ op: 'delete' as const, key: assignmentKey(a.machine, slotOf(a)) })));
  }

  /** Deletes the deployment records and journal entries beyond the retention limits, oldest first. */
  private async pruneHistory(): Promise<void> {
    if (this.pruning) return;
    this.pruning = true;
    try {
      const [deployments, journal] = await Promise.all([listDeployments(this.store), this.store.list(journalPrefix)]);
      const doomed = [
        ...expiredDeployments(deployments, this.retention.deploymentsPerService).map(deploymentKey),
        ...expiredJournalKeys(journal.map((kv) => kv.key), this.retention.journalEntries),
      ];
      for (let i = 0; i < doomed.length; i += DELETE_BATCH) {
        await this.store.txn([], doomed.slice(i, i + DELETE_BATCH).map((key) => ({ op: 'delete' as const, key })));
      }
      if (doomed.length > 0) this.log.info({ deleted: doomed.length }, 'deleted deployment records and journal entries beyond the retention limits');
    } catch (error) {
      if (!(error instanceof FencedWriteError || error instanceof NotLeaderError)) this.log.warn({ err: error }, 'pruning history failed; retrying at the next check');
    } finally {
      this.pruning = false;
    }
  }

  private async pruneOrphans(): Promise<void> {
    const declared = await this.declaredServices();
    await this.removeAssignments((assignment) => !declared.has(assignment.service));
  }

  private async declaredServices(): Promise<Set<string>> {
    return new Set((await this.store.list(servicePrefix)).map((kv) => kv.key.slice(servicePrefix.length)));
  }
}
