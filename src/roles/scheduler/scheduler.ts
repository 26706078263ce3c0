import type { FastifyBaseLogger } from 'fastify';
import type { Store } from '../../store/store.js';
import { deploymentPrefix, journalPrefix, lastSegment } from '../../store/keys.js';
import { FencedStore, FencedWriteError } from '../../store/fenced-store.js';
import { HttpError } from '../../http/errors.js';
import { HandOff, type LeaderReply, type LeaderRequest } from './handoff.js';
import { Leadership, NotLeaderError } from './leadership.js';
import type { DeployReply } from '../../schemas/release.js';
import { RegistryClient, type RegistryClientOptions } from './deploys/registry-client.js';
import type { DeployTrigger } from './deploys/deploy.js';
import { idTime, sortAfter } from '../../store/ids.js';
import { watchDeployments } from '../../store/records/deployments.js';
import type { PrefixCache } from '../../store/prefix-cache.js';
import { ClusterWatch, type ClusterSnapshot, type MachineAwayUntil } from './cluster-snapshot.js';
import type { Machine, MachineAway } from '../../schemas/cluster.js';
import { DeploymentRunner } from './deploys/runner.js';
import type { JobStart } from './deploys/jobs.js';
import type { Job } from '../../schemas/job.js';
import { Healer } from './healing/healer.js';
import { Housekeeping } from './housekeeping/housekeeping.js';
import { defaultEngineGraceSeconds, defaultMachineGraceMs, defaultRetention, type BackupSchedule, type RetentionLimits } from '../../config.js';
import { ScheduledBackups, type BackupReadiness } from './housekeeping/scheduled-backups.js';
import { Notifier } from './notifications/notifier.js';
import { ScheduledRuns } from './schedules/scheduled-runs.js';
import { onStorePing } from '../../store/store-heartbeat.js';
import { RENEWAL_GRACE_TTLS } from '../../store/leased-keys.js';
import { migrateStoreSchema } from './housekeeping/schema-migration.js';
import { defaultRetryPolicy, type RetryPolicy } from '../../notifications/retry-schedule.js';
import { WorkQueue } from '../../work-queue.js';
import type { Service } from '../../schemas/service.js';
import type { ServiceTags } from '../../schemas/registry.js';
import { parseImageReference, repositoryName } from '../../image-reference.js';

// The scheduler role's lifecycle: leadership (one leader at a time, every write fenced on it), the
// watched cluster snapshot, and the wiring of what the leader does: deployments (deploys/),
// self-healing (healing/: its pass runs on the leader's work queue, with the renewal grace kept
// here), housekeeping (housekeeping/), notifications (notifications/) and scheduled jobs
// (schedules/). A follower hands deploys, rollbacks and stops to the leader (handoff.ts).

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
  /** How long a machine whose agent stopped on purpose keeps its units, ms (default 5 min). */
  machineGraceMs?: number;
  /** The leader's scheduled backups (--backup-dir); none when unset. */
  backups?: BackupSchedule;
  /** Where the leader writes its backup before migrating the store's schema. */
  backupDir: string;
}

/** How long a follower waits for the leader to answer work it handed over. */
const HANDOFF_TIMEOUT_MS = 30_000;
/** How soon a leader whose schema migration failed (a full disk, an unwritable --backup-dir) tries again. */
const SCHEMA_RETRY_MS = 10_000;
/**
 * How soon a leader whose takeover failed part-way (a store read that missed its deadline) takes
 * over again: until it has, handed-off requests go unanswered and the last leader's deployments
 * wait (the heal pass would carry them on, but only 10 s later).
 */
const LEAD_RETRY_MS = 1_000;

/** The periodic resync of self-healing, beside the watch events that trigger it. */
const HEAL_INTERVAL_MS = 10_000;

/** The leader's passes on its work queue: what each does when it fails, for the log. */
const LEADER_PASSES = {
  heal: 'healing failed; retrying',
  'clean-up': 'cleaning up after a deleted service failed; retrying',
} as const;
type LeaderPass = keyof typeof LEADER_PASSES;

// After it wins the leadership, and after the store returns from an outage, a scheduler gives every
// agent RENEWAL_GRACE_TTLS lease TTLs to register before a missing machine counts as lost: an
// embedded store drops every lease when it opens (after `platform up` restarts no machine is
// registered yet), and a frozen etcd revokes the agents' expired leases when it wakes.

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
  private deployments?: PrefixCache;
  private runner?: DeploymentRunner;
  /** The leader's heal pass (healing/healer.ts); its triggers and the renewal grace it asks about are here. */
  private healer?: Healer;
  private notifier?: Notifier;
  /** Scheduled jobs' ticks (schedules/). */
  private scheduledRuns?: ScheduledRuns;
  private healTimer?: NodeJS.Timeout;
  private pruneTimer?: NodeJS.Timeout;
  /**
   * Healing and clean-up passes: a trigger during a pass (a machine lost, a drain set) causes one
   * more pass after it, instead of waiting for the next check; a failed pass is retried after 1 s,
   * doubling up to the 10 s check.
   */
  private readonly leaderWork: WorkQueue;
  /** Until then (ms) machines missing from the store are not lost: the renewal grace after an election or a store outage. */
  private renewalGraceUntil = 0;
  /** Machines seen registered since the grace began: one of them missing now was lost under this leader, grace or not. */
  private readonly seenSinceGraceBegan = new Set<string>();
  /** The store did not answer the last ping: no machine counts as lost until it answers and the grace after it ends. */
  private storeLost = false;
  /**
   * Until then (ms) every missing machine is spared, seen or not: the grace after the store
   * returned. A record seen then may still be the one under the agent's old lease, which etcd
   * (restarted, it renews every lease once) lets expire a TTL later if the agent has not written
   * the record again under a new one by then.
   */
  private storeGraceUntil = 0;
  private stopHearingStore?: () => void;
  private renewalGraceTimer?: NodeJS.Timeout;
  /** Takes over again after a takeover that failed part-way (a schema migration, a store read). */
  private leadRetryTimer?: NodeJS.Timeout;
  /** Counts elections won: a retry of a takeover is for the leadership it was made in, not a later one. */
  private terms = 0;
  /** Heals due when a grace period ends: a machine's engine's (by outage start) or an away machine's. */
  private readonly graceTimers = new Map<string, NodeJS.Timeout>();

  constructor(private readonly options: SchedulerOptions) {
    this.log = options.log;
    this.leadership = new Leadership(options.store, {
      id: options.id,
      address: options.address,
      announce: options.announce ?? true,
      ttlSeconds: options.leaseTtlSeconds,
      log: options.log,
      events: {
        elected: () => {
          this.terms++;
          clearTimeout(this.leadRetryTimer);
          void this.lead();
        },
        deposed: () => {
          this.runner?.forget();
          this.scheduledRuns?.forget();
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
    this.leaderWork = new WorkQueue({
      run: (key) => (key === 'heal' ? this.healPass() : this.cleanUpPass()),
      onError: (error, key) => this.log.warn({ err: error }, LEADER_PASSES[key as LeaderPass]),
      retry: { firstMs: 1000, maxMs: HEAL_INTERVAL_MS },
    });
  }

  async start(): Promise<void> {
    const cluster = await ClusterWatch.start(this.store, this.engineGraceSeconds, this.options.machineGraceMs);
    this.cluster = cluster;
    // On the store itself, not the fenced one: reads need no fence, and in `platform up` the
    // orchestrator's event stream shares the same watched copy.
    this.deployments = await watchDeployments(this.options.store);
    this.runner = new DeploymentRunner({ store: this.store, log: this.log, cluster, deployments: this.deployments, registry: this.registry, isLeader: () => this.isLeader(), stopTimeoutSeconds: this.stopTimeoutSeconds });
    this.scheduledRuns = new ScheduledRuns({ store: this.store, deployments: this.deployments, cluster, jobs: this.runner.jobs, isLeader: () => this.isLeader(), log: this.log });
    this.healer = new Healer({ store: this.store, cluster, runner: this.runner, renewing: (snapshot, holding) => this.renewing(snapshot, holding), renewalGraceUntil: () => this.renewalGraceUntil });
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
    cluster.onChange('machines', (event) => {
      if (event.type !== 'put') return;
      const machine = parsed<Machine>(event.value);
      if (!machine) return;
      this.healWhenEngineGraceEnds(machine);
      // Every machine registered, also one that comes and goes between two heal passes: its loss makes the next pass look for its jobs.
      if (machine.id) this.healer?.sawMachine(machine.id);
    });
    cluster.onChange('away', (event) => event.type === 'put' && this.healWhenMachineGraceEnds(event.value));
    this.healTimer = setInterval(() => void (this.isLeader() && this.heal()), HEAL_INTERVAL_MS);
    this.pruneTimer = setInterval(() => void (this.isLeader() && this.prune()), PRUNE_INTERVAL_MS);
    // The same heartbeat as the cluster watch's: its copies become readable again only after this hears the store back.
    this.stopHearingStore = onStorePing(this.store, (failure) => this.heardStore(failure));
    await this.leadership.start();
  }

  /**
   * A machine that reports its engine gone is healed the moment its grace period ends, not at the
   * next 10 s check. One timer per outage start; a record without one (engine back) needs none.
   */
  private healWhenEngineGraceEnds(machine: Partial<Machine>): void {
    const since = machine.docker?.unreachableSince;
    if (since !== undefined) this.healAt(`engine ${since}`, Date.parse(since) + (this.engineGraceSeconds ?? defaultEngineGraceSeconds) * 1000);
  }

  /** A machine away past its grace is healed (its units move) the moment the grace ends. */
  private healWhenMachineGraceEnds(value: string | undefined): void {
    const away = parsed<MachineAway>(value);
    if (away?.machine && away.since) this.healAt(`away ${away.machine} ${away.since}`, Date.parse(away.since) + (this.options.machineGraceMs ?? defaultMachineGraceMs));
  }

  /** One timer per grace period (by `key`) that heals just after `atMs`. */
  private healAt(key: string, atMs: number): void {
    if (this.graceTimers.has(key)) return;
    const timer = setTimeout(() => {
      this.graceTimers.delete(key);
      if (this.isLeader()) void this.heal();
    }, Math.max(0, atMs - Date.now()) + 100);
    this.graceTimers.set(key, timer);
  }

  /**
   * "I lost the store" is not "machines lost their leases": when the store answers again after
   * an outage, every machine gets the renewal grace, whoever leads, before healing counts it lost.
   */
  private heardStore(failure: unknown): void {
    if (failure !== undefined) {
      if (!this.storeLost) this.log.warn({ reason: (failure as Error).message }, 'store unreachable: no machine counts as lost until it is back and the agents have renewed');
      this.storeLost = true;
      return;
    }
    if (!this.storeLost) return;
    this.storeLost = false;
    this.startRenewalGrace();
    this.storeGraceUntil = this.renewalGraceUntil;
    this.log.info({ until: new Date(this.renewalGraceUntil).toISOString() }, 'store reachable again: every machine has a renewal grace');
  }

  isLeader(): boolean {
    return this.leadership.isLeader();
  }

  /** For /readyz: the renewal grace of the current leadership, the last heal pass, and the machines away and expected back. */
  healingState(): { renewalGraceUntil?: string; healedAt?: string; machinesAway: MachineAwayUntil[] } {
    const at = (ms: number) => (ms ? new Date(ms).toISOString() : undefined);
    return { renewalGraceUntil: at(this.renewalGraceUntil), healedAt: at(this.healer?.healedAt ?? 0), machinesAway: this.cluster?.machinesAway() ?? [] };
  }

  /** For /readyz: the scheduled backups, with a warning when the newest verified one is stale. */
  async backupState(): Promise<{ backups?: BackupReadiness }> {
    return this.backups ? { backups: await this.backups.readiness() } : {};
  }

  async close(): Promise<void> {
    clearInterval(this.healTimer);
    clearInterval(this.pruneTimer);
    clearTimeout(this.renewalGraceTimer);
    this.stopHearingStore?.();
    clearTimeout(this.leadRetryTimer);
    for (const timer of this.graceTimers.values()) clearTimeout(timer);
    await this.leaderWork.close();
    await this.housekeeping.close();
    await this.backups?.close();
    await this.handOff.close();
    await this.leadership.close();
    await this.scheduledRuns?.close();
    await this.runner?.close();
    await this.notifier?.close();
    await this.cluster?.close();
    await this.deployments?.close();
    await this.registry.close();
  }

  /** Deploys, here when this scheduler leads, else through the leader. */
  async deploy(trigger: DeployTrigger): Promise<DeployReply> {
    if (!this.isLeader()) return (await this.handOff.send({ kind: 'deploy', trigger }, HANDOFF_TIMEOUT_MS)) as DeployReply;
    return this.leading().deploy(trigger);
  }

  /** The tags of the service's repository, newest version first (`v10` before `v9`), its registry's login kept here. */
  async tagsOf(service: Service): Promise<ServiceTags> {
    const image = parseImageReference(service.containerImage);
    const tags = await this.registry.listTags(image);
    return { repository: repositoryName(image), tags: tags.sort((a, b) => b.localeCompare(a, 'en', { numeric: true })) };
  }

  async rollback(service: string, version: number, runReleaseCommand = false): Promise<DeployReply> {
    if (!this.isLeader()) return (await this.handOff.send({ kind: 'rollback', service, version, ...(runReleaseCommand ? { runReleaseCommand } : {}) }, HANDOFF_TIMEOUT_MS)) as DeployReply;
    return this.leading().rollback(service, version, runReleaseCommand);
  }

  /** Places a job of the service's release, here when this scheduler leads, else through the leader. */
  async startJob(job: JobStart): Promise<Job> {
    if (!this.isLeader()) return (await this.handOff.send({ kind: 'job-start', job }, HANDOFF_TIMEOUT_MS)) as Job;
    return this.leading().jobs.start(job);
  }

  async stopJob(service: string, id: string): Promise<Job> {
    if (!this.isLeader()) return (await this.handOff.send({ kind: 'job-stop', service, id }, HANDOFF_TIMEOUT_MS)) as Job;
    return this.leading().jobs.stop(service, id);
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
      this.healer?.forgetAttempts();
      void this.backups?.lead();
      // Ticks due while no scheduler led (this election among them) run now: the newest one of each schedule.
      void this.scheduledRuns?.lead();
      await this.handOff.serve((request) => this.execute(request), () => this.isLeader());
      // Deliveries the last leader left pending go out from here.
      this.notifier?.kick();
      await this.cleanUp();
      await this.leading().resume();
      await this.heal();
    } catch (error) {
      if (error instanceof FencedWriteError || error instanceof NotLeaderError) return; // deposed meanwhile: the next election takes over
      this.log.warn({ err: error }, `taking over as leader failed part-way; trying again in ${LEAD_RETRY_MS / 1000} s`);
      this.leadAgainIn(LEAD_RETRY_MS);
    }
  }

  /** Runs the takeover again after `delayMs`, if this scheduler still leads in the same term. */
  private leadAgainIn(delayMs: number): void {
    const term = this.terms;
    clearTimeout(this.leadRetryTimer);
    this.leadRetryTimer = setTimeout(() => void (this.terms === term && this.isLeader() && this.lead()), delayMs);
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
      this.leadAgainIn(SCHEMA_RETRY_MS);
      return false;
    }
  }

  /** Machines missing now are not lost until the grace ends; the leader heals again then. */
  private startRenewalGrace(): void {
    const graceMs = RENEWAL_GRACE_TTLS * this.options.leaseTtlSeconds * 1000;
    this.renewalGraceUntil = Date.now() + graceMs;
    this.seenSinceGraceBegan.clear();
    clearTimeout(this.renewalGraceTimer);
    this.renewalGraceTimer = setTimeout(() => void (this.isLeader() && this.heal()), graceMs + 100);
  }

  /**
   * Machines that hold assignments and are not registered: all of them while the store is lost
   * and during the grace after it returned; during the grace after an election, those this leader
   * has not seen registered since: one it saw lost its lease on its watch (a partition, a crash)
   * and is healed at once, as before the grace existed.
   */
  private renewing(snapshot: ClusterSnapshot, holding: readonly string[] = snapshot.assignments.map((a) => a.machine)): Set<string> {
    const now = Date.now();
    const sparesAll = this.storeLost || now < this.storeGraceUntil;
    if (!sparesAll && now >= this.renewalGraceUntil) return new Set();
    const registered = new Set(snapshot.machines.map((machine) => machine.id));
    if (!sparesAll) for (const machine of registered) this.seenSinceGraceBegan.add(machine);
    const missing = holding.filter((machine) => !registered.has(machine) && (sparesAll || !this.seenSinceGraceBegan.has(machine)));
    return new Set(missing);
  }

  private answer(request: LeaderRequest): Promise<unknown> {
    switch (request.kind) {
      case 'deploy':
        return this.deploy(request.trigger);
      case 'rollback':
        return this.rollback(request.service, request.version, request.runReleaseCommand);
      case 'stop':
        return this.stopService(request.service);
      case 'job-start':
        return this.startJob(request.job);
      case 'job-stop':
        return this.stopJob(request.service, request.id);
    }
  }

  private async execute(request: LeaderRequest): Promise<LeaderReply> {
    try {
      return { status: 200, body: await this.answer(request) };
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

  /** Deleted services' units and history go; resolves once a pass that started after the call has ended. */
  private cleanUp(): Promise<void> {
    return this.leaderWork.add('clean-up');
  }

  private async cleanUpPass(): Promise<void> {
    if (!this.isLeader()) return;
    await quietWhenDeposed(async () => {
      if (this.cluster) await this.housekeeping.pruneOrphans(this.cluster.snapshot());
      await this.housekeeping.pruneHistory();
    });
  }

  /** Heals (below); resolves once a heal pass that started after the call has ended. */
  private heal(): Promise<void> {
    return this.leaderWork.add('heal');
  }

  /** The heal pass (healing/healer.ts), while this scheduler leads. */
  private async healPass(): Promise<void> {
    const { healer } = this;
    if (!this.isLeader() || !healer) return;
    await quietWhenDeposed(() => healer.pass());
  }
}

/** Runs a leader's pass; losing the leadership meanwhile ends it quietly (the next leader does the work). */
async function quietWhenDeposed(pass: () => Promise<void>): Promise<void> {
  try {
    await pass();
  } catch (error) {
    if (!(error instanceof FencedWriteError || error instanceof NotLeaderError)) throw error;
  }
}

/** A record as a watch event delivers it; a value that does not parse is none. */
function parsed<T>(value: string | undefined): Partial<T> | undefined {
  if (value === undefined) return undefined;
  try {
    return JSON.parse(value) as Partial<T>;
  } catch {
    return undefined;
  }
}
