import type { FastifyBaseLogger } from 'fastify';
import type { Store } from '../../store/store.js';
import { deploymentPrefix, journalPrefix, lastSegment } from '../../store/keys.js';
import { FencedStore, FencedWriteError } from '../../store/fenced-store.js';
import { HttpError } from '../../http/errors.js';
import { HandOff, type LeaderReply, type LeaderRequest } from './handoff.js';
import { Leadership, NotLeaderError } from './leadership.js';
import { currentTarget, type DeployReply } from '../../schemas/release.js';
import { keepsUnitsWithVolumes } from '../../schemas/service.js';
import { RegistryClient, type RegistryClientOptions } from './registry-client.js';
import { acceptDeploy, acceptRollback, type DeployTrigger } from './deploy.js';
import { listDeployments } from './deployment-records.js';
import { idTime, sortAfter } from './ids.js';
import { getRelease } from './releases.js';
import { ClusterWatch, defaultEngineGraceSeconds, type ClusterSnapshot } from './cluster-snapshot.js';
import type { Machine } from '../../schemas/cluster.js';
import { DeploymentRunner } from './runner.js';
import { planHealing } from './healing.js';
import { Housekeeping } from './housekeeping.js';
import { defaultRetention, type BackupSchedule, type RetentionLimits } from '../../config.js';
import { ScheduledBackups, type BackupReadiness } from './scheduled-backups.js';
import { Notifier } from './notifier.js';
import { migrateStoreSchema } from './schema-migration.js';
import { defaultRetryPolicy, type RetryPolicy } from '../../notifications/retry-schedule.js';

// The scheduler role's lifecycle: leadership (one leader at a time, every write fenced on it), the
// watched cluster snapshot, and the wiring of what the leader does: deployments (runner.ts),
// self-healing (healing.ts, a pure plan applied here) and housekeeping (housekeeping.ts).
// A follower hands deploys, rollbacks and stops to the leader (handoff.ts).

export interface SchedulerOptions {
  store: Store;
  log: FastifyBaseLogger;
  /** This scheduler's id and address, for the leader key and its announcement. */
  id: string;
  address: string;
  /** Whether the leader writes /platform/services/scheduler (false when a `platform announce` sidekick does). */
  announce?: boolean;
  /** TTL of the leadership lease: a dead leader is replaced within it. */
  leaseTtlSeconds: number;
  registry?: RegistryClientOptions;
  /** How long stopping a service's units may take before the request fails. */
  stopTimeoutSeconds?: number;
  /** How much history the leader keeps. */
  retention?: RetentionLimits;
  /** Outbound notifications: when failed deliveries are retried, and how long one attempt may take. */
  notify?: { policy: RetryPolicy; timeoutMs: number; allowedDestinations?: readonly string[] };
  /** How long a machine may have no Docker engine before its units move (default 30 s). */
  engineGraceSeconds?: number;
  /** Where the leader writes its backup before migrating the store's schema. */
  backupDir: string;
  /** The leader's scheduled backups (--backup-dir); none when unset. */
  backups?: BackupSchedule;
}

/** How long a follower waits for the leader to answer work it handed over. */
const HANDOFF_TIMEOUT_MS = 30_000;
/** How soon a leader whose schema migration failed (a full disk, an unwritable --backup-dir) tries again. */
const SCHEMA_RETRY_MS = 10_000;

/** The periodic resync of self-healing, beside the watch events that trigger it. */
const HEAL_INTERVAL_MS = 10_000;

/**
 * After it wins the leadership, a scheduler gives every agent this many lease TTLs to register
 * before a missing machine counts as lost: a live agent renews every TTL/3, and an embedded store
 * drops every lease when it opens, so after `platform up` restarts no machine is registered yet.
 */
const RENEWAL_GRACE_TTLS = 3;

/** How often the leader deletes history beyond the retention limits. */
const PRUNE_INTERVAL_MS = 60_000;

export class Scheduler {
  /** The store as the leader writes it: every write is fenced on the leadership. Reads pass through. */
  readonly store: Store;
  private readonly log: FastifyBaseLogger;
  private readonly leadership: Leadership;
  private readonly handOff: HandOff;
  private readonly registry: RegistryClient;
  private readonly stopTimeoutSeconds: number;
  private readonly engineGraceSeconds: number | undefined;
  private readonly housekeeping: Housekeeping;
  private readonly backups: ScheduledBackups | undefined;
  private cluster?: ClusterWatch;
  private runner?: DeploymentRunner;
  private notifier?: Notifier;
  private healTimer?: NodeJS.Timeout;
  private pruneTimer?: NodeJS.Timeout;
  private healing = false;
  /** Until then (ms) machines missing from the store are not lost: the renewal grace after an election. */
  private renewalGraceUntil = 0;
  /** Machines this leadership has seen registered: one of them missing now was lost under this leader, grace or not. */
  private readonly seenSinceElection = new Set<string>();
  private renewalGraceTimer?: NodeJS.Timeout;
  private schemaRetryTimer?: NodeJS.Timeout;
  /** When the last completed heal pass took its snapshot (ms), for /readyz: a test waits for one after the renewal grace. */
  private healedAt = 0;
  /** Heals due when a machine's engine grace period ends, by outage start. */
  private readonly engineGraceTimers = new Map<string, NodeJS.Timeout>();

  constructor(private readonly options: SchedulerOptions) {
    this.log = options.log;
    this.leadership = new Leadership(options.store, {
      id: options.id,
      address: options.address,
      announce: options.announce ?? true,
      ttlSeconds: options.leaseTtlSeconds,
      log: options.log,
      events: {
        elected: () => void this.lead(),
        deposed: () => {
          this.runner?.forget();
          this.backups?.stop();
        },
      },
    });
    this.store = new FencedStore(options.store, () => this.leadership.fence());
    this.handOff = new HandOff(options.store, options.log);
    this.registry = new RegistryClient(options.registry);
    this.stopTimeoutSeconds = options.stopTimeoutSeconds ?? 60;
    this.engineGraceSeconds = options.engineGraceSeconds;
    this.housekeeping = new Housekeeping(this.store, options.retention ?? defaultRetention, options.log);
    this.backups = options.backups && new ScheduledBackups(options.backups, { store: options.store, journal: this.store, log: options.log });
  }

  async start(): Promise<void> {
    const cluster = await ClusterWatch.start(this.store, this.engineGraceSeconds);
    this.cluster = cluster;
    this.runner = new DeploymentRunner({ store: this.store, log: this.log, cluster, isLeader: () => this.isLeader(), stopTimeoutSeconds: this.stopTimeoutSeconds });
    this.notifier = await Notifier.start({
      store: this.options.store,
      leaderStore: this.store,
      cluster,
      isLeader: () => this.isLeader(),
      log: this.log,
      ...(this.options.notify ?? { policy: defaultRetryPolicy, timeoutMs: 10_000 }),
    });
    // Level-triggered clean-up: whenever a declaration disappears (by any route), its units and history go.
    cluster.onChange('services', (event) => {
      if (event.type === 'delete' && this.isLeader()) void this.cleanUp();
    });
    // A machine whose lease expired takes its units with it; a drained machine's units move: place them elsewhere now.
    cluster.onChange('machines', (event) => event.type === 'delete' && this.isLeader() && void this.heal());
    cluster.onChange('drains', (event) => event.type === 'put' && this.isLeader() && void this.heal());
    cluster.onChange('machines', (event) => event.type === 'put' && this.healWhenEngineGraceEnds(event.value));
    this.healTimer = setInterval(() => void (this.isLeader() && this.heal()), HEAL_INTERVAL_MS);
    this.pruneTimer = setInterval(() => void (this.isLeader() && this.prune()), PRUNE_INTERVAL_MS);
    await this.leadership.start();
  }

  /**
   * A machine that reports its engine gone is healed the moment its grace period ends, not at the
   * next 10 s check. One timer per outage start; a record without one (engine back) needs none.
   */
  private healWhenEngineGraceEnds(value: string | undefined): void {
    const since = unreachableSince(value);
    if (since === undefined || this.engineGraceTimers.has(since)) return;
    const delay = Math.max(0, Date.parse(since) + (this.engineGraceSeconds ?? defaultEngineGraceSeconds) * 1000 - Date.now()) + 100;
    const timer = setTimeout(() => {
      this.engineGraceTimers.delete(since);
      if (this.isLeader()) void this.heal();
    }, delay);
    this.engineGraceTimers.set(since, timer);
  }

  isLeader(): boolean {
    return this.leadership.isLeader();
  }

  /** For /readyz: the renewal grace of the current leadership and the last heal pass. */
  healingState(): { renewalGraceUntil?: string; healedAt?: string } {
    const at = (ms: number) => (ms ? new Date(ms).toISOString() : undefined);
    return { renewalGraceUntil: at(this.renewalGraceUntil), healedAt: at(this.healedAt) };
  }

  /** For /readyz: the scheduled backups, with a warning when the newest verified one is stale. */
  async backupState(): Promise<{ backups?: BackupReadiness }> {
    return this.backups ? { backups: await this.backups.readiness() } : {};
  }

  async close(): Promise<void> {
    clearInterval(this.healTimer);
    clearInterval(this.pruneTimer);
    clearTimeout(this.renewalGraceTimer);
    clearTimeout(this.schemaRetryTimer);
    for (const timer of this.engineGraceTimers.values()) clearTimeout(timer);
    await this.backups?.close();
    await this.handOff.close();
    await this.leadership.close();
    await this.runner?.close();
    await this.notifier?.close();
    await this.cluster?.close();
    await this.registry.close();
  }

  /** Deploys, here when this scheduler leads, else through the leader. */
  async deploy(trigger: DeployTrigger): Promise<DeployReply> {
    if (!this.isLeader()) return (await this.handOff.send({ kind: 'deploy', trigger }, HANDOFF_TIMEOUT_MS)) as DeployReply;
    return this.leading().accept(trigger.serviceName, () => acceptDeploy(this.store, this.registry, trigger));
  }

  async rollback(service: string, version: number): Promise<DeployReply> {
    if (!this.isLeader()) return (await this.handOff.send({ kind: 'rollback', service, version }, HANDOFF_TIMEOUT_MS)) as DeployReply;
    return this.leading().accept(service, () => acceptRollback(this.store, service, version));
  }

  /** Removes the service's assignments and waits for its units to stop; returns those still running. */
  async stopService(service: string): Promise<string[]> {
    if (!this.isLeader()) return (await this.handOff.send({ kind: 'stop', service }, this.stopTimeoutSeconds * 1000 + 10_000)) as string[];
    return this.leading().stop(service);
  }

  private leading(): DeploymentRunner {
    if (!this.runner) throw new NotLeaderError();
    return this.runner;
  }

  /** On election: answer handed-off requests, clean up, and carry on what the last leader left. */
  private async lead(): Promise<void> {
    try {
      // First, before any record is made: ids from here on sort after the last leader's.
      for (const prefix of [deploymentPrefix, journalPrefix]) {
        const newest = (await this.store.list(prefix)).map((kv) => lastSegment(kv.key)).findLast((id) => idTime(id) !== undefined);
        if (newest) sortAfter(newest);
      }
      if (!(await this.migrateSchema())) return;
      this.startRenewalGrace();
      void this.backups?.lead();
      await this.handOff.serve((request) => this.execute(request), () => this.isLeader());
      // Deliveries the last leader left pending go out from here.
      this.notifier?.kick();
      await this.cleanUp();
      await this.leading().resume();
      await this.heal();
    } catch (error) {
      this.log.warn({ err: error }, 'taking over as leader failed part-way; the next event retries');
    }
  }

  /**
   * The store's layout brought to this program's before the leader's other work reads it. A failed
   * backup or migration is logged and tried again while this scheduler leads: the store is left as
   * it was, and the older roles that read it carry on.
   */
  private async migrateSchema(): Promise<boolean> {
    try {
      await migrateStoreSchema({ store: this.options.store, leaderStore: this.store, backupDir: this.options.backupDir, log: this.log });
      return true;
    } catch (error) {
      this.log.error({ err: error }, `the store schema was not migrated; retrying in ${SCHEMA_RETRY_MS / 1000} s`);
      this.schemaRetryTimer = setTimeout(() => void (this.isLeader() && this.lead()), SCHEMA_RETRY_MS);
      return false;
    }
  }

  /** Machines missing now are not lost until the grace ends; the leader heals again then. */
  private startRenewalGrace(): void {
    const graceMs = RENEWAL_GRACE_TTLS * this.options.leaseTtlSeconds * 1000;
    this.renewalGraceUntil = Date.now() + graceMs;
    this.seenSinceElection.clear();
    clearTimeout(this.renewalGraceTimer);
    this.renewalGraceTimer = setTimeout(() => void (this.isLeader() && this.heal()), graceMs + 100);
  }

  /**
   * Machines that hold assignments and are not registered, while the renewal grace lasts, unless
   * this leader saw them registered: those lost their lease on its watch (a partition, a crash) and
   * are healed at once, as before the grace existed.
   */
  private renewing(snapshot: ClusterSnapshot): Set<string> {
    if (Date.now() >= this.renewalGraceUntil) return new Set();
    const registered = new Set(snapshot.machines.map((machine) => machine.id));
    for (const machine of registered) this.seenSinceElection.add(machine);
    const missing = snapshot.assignments.map((a) => a.machine).filter((machine) => !registered.has(machine) && !this.seenSinceElection.has(machine));
    return new Set(missing);
  }

  private async execute(request: LeaderRequest): Promise<LeaderReply> {
    try {
      if (request.kind === 'deploy') return { status: 200, body: await this.deploy(request.trigger) };
      if (request.kind === 'rollback') return { status: 200, body: await this.rollback(request.service, request.version) };
      return { status: 200, body: await this.stopService(request.service) };
    } catch (error) {
      const status = error instanceof HttpError ? error.statusCode : 500;
      return { status, body: { message: (error as Error).message } };
    }
  }

  private async prune(): Promise<void> {
    await this.housekeeping.pruneHistory();
    await this.notifier?.prune().catch((error: unknown) => {
      if (!(error instanceof FencedWriteError || error instanceof NotLeaderError)) this.log.warn({ err: error }, 'pruning notification deliveries failed; retrying at the next check');
    });
  }

  private async cleanUp(): Promise<void> {
    try {
      if (this.cluster) await this.housekeeping.pruneOrphans(this.cluster.snapshot());
      await this.housekeeping.pruneHistory();
    } catch (error) {
      if (!(error instanceof FencedWriteError || error instanceof NotLeaderError)) this.log.warn({ err: error }, 'cleaning up after a deleted service failed; retrying at the next check');
    }
  }

  /** Applies the self-healing plan: a `reschedule` deployment of the current release per service that lost units. */
  private async heal(): Promise<void> {
    if (this.healing || !this.cluster || !this.runner) return;
    this.healing = true;
    try {
      const runner = this.runner;
      const planned = Date.now();
      const snapshot = this.cluster.snapshot();
      const deployments = await listDeployments(this.store);
      const declared = new Set(snapshot.services.map((service) => service.name));
      const instances = new Map<string, number>();
      const staying = new Set<string>();
      for (const service of declared) {
        const target = currentTarget(deployments.filter((d) => d.service === service));
        const release = target?.state === 'succeeded' && !runner.busy(service) ? await getRelease(this.store, service, target.release) : undefined;
        if (release) instances.set(`${service}/${release.version}`, release.config.numInstances);
        if (release && keepsUnitsWithVolumes(release.config)) staying.add(`${service}/${release.version}`);
      }
      const plan = planHealing({
        ...snapshot,
        deployments,
        declared,
        busy: (service) => runner.busy(service),
        instancesOf: (service, release) => instances.get(`${service}/${release}`),
        keepsVolumes: (service, release) => staying.has(`${service}/${release}`),
        renewing: this.renewing(snapshot),
      });
      for (const { service, release, why } of plan) {
        const found = await getRelease(this.store, service, release);
        if (found) await runner.reschedule(found, why);
      }
      this.healedAt = planned;
    } catch (error) {
      if (!(error instanceof FencedWriteError || error instanceof NotLeaderError)) this.log.warn({ err: error }, 'healing failed; retrying at the next check');
    } finally {
      this.healing = false;
    }
  }
}

/** The outage start a machine record reports, if any (a record that does not parse reports none). */
function unreachableSince(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  try {
    return (JSON.parse(value) as Partial<Machine>).docker?.unreachableSince;
  } catch {
    return undefined;
  }
}
