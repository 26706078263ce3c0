import type { Writable } from 'node:stream';
import { trace } from '../../trace.js';
import type Docker from 'dockerode';
import type { FastifyBaseLogger } from 'fastify';
import type { Assignment, Machine, UnitStatus } from '../../schemas/cluster.js';
import type { RoleServer } from '../../http/server.js';
import type { Store, Watch } from '../../store/store.js';
import { assignmentPrefix, componentPrefix } from '../../store/keys.js';
import { PrefixCache } from '../../store/prefix-cache.js';
import { announcedPorts, portOfAddress } from '../../schemas/service.js';
import { LeasedKeys } from '../../store/leased-keys.js';
import { credentialFor } from '../../auth/registry-credentials.js';
import { defaultHostNetworkUser, defaultUnitLogs, type UnitLogRotation } from '../../config.js';
import { AssignmentCheck, type RefusedAssignment } from './assignment-check.js';
import { WorkQueue } from '../../work-queue.js';
import type { NetworkMode } from './container-spec.js';
import { canonicalName, hostPortOf, listUnitContainers, type UnitContainer } from './containers.js';
import { planReplacements } from './replacement-plan.js';
import { slotOf } from '../../units.js';
import { EngineCheck, connectDocker, dockerErrorMessage, engineCheckTimeoutMs, engineUnreachableAdvice, withTimeout } from './docker-client.js';
import { watchContainerEvents, type DockerEventWatch } from './docker-events.js';
import { defaultMaxUnits, defaultReserve } from '../../config.js';
import { MachineRegistration, unitCapacity, type EngineResources, type ResourceSettings } from './machine-registration.js';
import { registerAgentRoutes } from './routes.js';
import { UnitStatusReporter, type UnitFailure } from './status-reporter.js';
import { keepFailedOutput } from './failed-output.js';
import { UnitReconciler, observedStatus } from './unit-reconciler.js';
import { JobRunner } from './job-runner.js';

// The agent makes its machine run what the scheduler assigned to it, like fleet's agent or a
// kubelet: on every trigger (assignment watch, Docker event, periodic resync) it recomputes from
// the full desired state (assignments) and actual state (this machine's containers), one pass at
// a time. Containers outlive the agent; a restarted agent adopts them by their labels and network
// mode, and replaces the ones on another network mode one at a time (replacement-plan.ts).

export interface AgentOptions {
  store: Store;
  /** The role server (created by the caller, not yet listening); the agent adds its routes. */
  server: RoleServer;
  machineId: string;
  /** host:port of this agent's API, as others reach it. */
  address: string;
  /** Host units are reached at (default 127.0.0.1). */
  unitHost?: string;
  network?: NetworkMode;
  /** Docker engine address (`unix:///…`, `tcp://…`); default DOCKER_HOST, else the default socket. */
  dockerHost?: string;
  labels?: Record<string, string>;
  /** Units this machine accepts (--max-units; default 100). */
  capacityUnits?: number;
  /** Memory and CPUs held back from the engine's, or reported instead (default: 512 MB, 0 CPUs held back). */
  resources?: ResourceSettings;
  leaseTtlSeconds?: number;
  stopGraceSeconds?: number;
  /** Seconds a unit is announced as draining before it is stopped (default 2). */
  drainSeconds?: number;
  /** How much output of each unit the engine keeps (default 10 MB × 3). */
  unitLogs?: UnitLogRotation;
  /** Ports the platform listens on at this machine besides PLATFORM_PORTS (this process's roles): no unit may take one. */
  platformPorts?: number[];
  /** `uid[:gid]` of units on host networking (default 65534:65534). */
  hostNetworkUser?: string;
  /** The memory limit of units declared without one (default none; the role's config defaults it to 1024). */
  defaultMemoryMB?: number;
  resyncIntervalMs?: number;
  log: FastifyBaseLogger;
}

export interface Agent {
  readonly machineId: string;
  readonly docker: Docker;
  /** Runs a full reconcile pass (after any pass in progress) and resolves when it is done. */
  reconcile(): Promise<void>;
  /** This machine's unit statuses as last reported. */
  statuses(): UnitStatus[];
  /** For /readyz: the store and the Docker engine answer. */
  readiness(): Promise<{ machine: string; docker: string }>;
  /**
   * Stops reconciling. Units keep running, and the lease is released, not revoked: the machine and
   * its statuses stay until its TTL runs out, so an agent restarted within it (`systemctl restart`)
   * takes them over and neither the scheduler nor the gateways see the machine or its units go.
   * The machine is recorded as away, so one back later, within the scheduler's machine grace (a
   * reboot), keeps its units too.
   */
  close(): Promise<void>;
}


/** The agent's one key on its work queue: every pass reconciles all of the machine's units. */
const RECONCILE = 'reconcile';

/** How long a stopping agent waits for the store to take its away record: a stop must not hang on a store that is down. */
const AWAY_WRITE_TIMEOUT_MS = 5_000;

export async function startAgent(options: AgentOptions): Promise<Agent> {
  const agent = new MachineAgent(options, await LeasedKeys.start(options.store, options.leaseTtlSeconds ?? 10, options.log));
  registerAgentRoutes(options.server, agent);
  await agent.start();
  return agent;
}

class MachineAgent implements Agent {
  readonly machineId: string;
  readonly docker: Docker;
  /** Passes over all of this machine's units, one at a time: triggers during a pass fold into one more pass after it. */
  private readonly passes: WorkQueue;
  private readonly reporter: UnitStatusReporter;
  private readonly registration: MachineRegistration;
  private readonly units: UnitReconciler;
  private readonly assignmentCheck: AssignmentCheck;
  private readonly engine: EngineCheck;
  /** The jobs placed on this machine (job-runner.ts): apart from its units, on their own watch. */
  private readonly jobs: JobRunner;
  private assignmentWatch: Watch | undefined;
  private dockerEvents: DockerEventWatch | undefined;
  private resyncTimer: NodeJS.Timeout | undefined;
  private closed = false;
  /** The engine's CPUs and memory, asked once it answers (they do not change while it runs). */
  private engineResources: EngineResources | undefined;
  /** Ports this process's roles listen on (the agent's own included), reported in the machine record. */
  private readonly ownPlatformPorts: number[];
  /** The roles' announcements: their ports are the platform's wherever they run. */
  private components: PrefixCache | undefined;

  constructor(
    private readonly options: AgentOptions,
    private readonly leasedKeys: LeasedKeys,
  ) {
    this.machineId = options.machineId;
    const agentPort = portOfAddress(options.address);
    this.ownPlatformPorts = [...new Set([...(options.platformPorts ?? []), ...(agentPort === undefined ? [] : [agentPort])])].sort((a, b) => a - b);
    this.docker = connectDocker(options.dockerHost);
    this.engine = new EngineCheck(this.docker);
    this.reporter = new UnitStatusReporter(leasedKeys, options.machineId);
    this.registration = new MachineRegistration(leasedKeys, options.store, {
      id: options.machineId,
      address: options.address,
      host: options.unitHost ?? '127.0.0.1',
      labels: options.labels ?? {},
      network: options.network ?? 'bridge',
      capacity: { units: options.capacityUnits ?? defaultMaxUnits },
      platformPorts: this.ownPlatformPorts,
    });
    this.units = new UnitReconciler({
      docker: this.docker,
      machineId: options.machineId,
      network: options.network ?? 'bridge',
      unitHost: options.unitHost ?? '127.0.0.1',
      stopGraceSeconds: options.stopGraceSeconds ?? 10,
      drainSeconds: options.drainSeconds ?? 2,
      unitLogs: options.unitLogs ?? defaultUnitLogs,
      platformPorts: () => this.platformPorts(),
      hostNetworkUser: options.hostNetworkUser ?? defaultHostNetworkUser,
      ...(options.defaultMemoryMB ? { defaultMemoryMB: options.defaultMemoryMB } : {}),
      reporter: this.reporter,
      credentials: (registry) => credentialFor(options.store, registry),
      wakeIn: (ms) => this.wakeIn(ms),
      keepFailedOutput: (assignment, containerId, exit) => keepFailedOutput(this.docker, options.store, options.machineId, assignment, containerId, exit),
      log: options.log,
    });
    this.jobs = new JobRunner({
      store: options.store,
      docker: this.docker,
      machineId: options.machineId,
      network: options.network ?? 'bridge',
      hostNetworkUser: options.hostNetworkUser ?? defaultHostNetworkUser,
      unitLogs: options.unitLogs ?? defaultUnitLogs,
      ...(options.defaultMemoryMB ? { defaultMemoryMB: options.defaultMemoryMB } : {}),
      credentials: (registry) => credentialFor(options.store, registry),
      log: options.log,
    });
    this.assignmentCheck = new AssignmentCheck(options.log, () => this.platformPorts());
    this.passes = new WorkQueue({
      run: () => this.reconcileOnce(),
      onError: (error) => options.log.warn({ err: error, machine: this.machineId }, 'reconcile failed; retrying at the next resync'),
    });
  }

  async start(): Promise<void> {
    const trigger = () => void this.reconcile();
    this.components = await PrefixCache.start(this.options.store, componentPrefix);
    this.leasedKeys.onLost(() => {
      this.reporter.forgetAll();
      trigger();
    });
    this.assignmentWatch = await this.options.store.watchPrefix(assignmentPrefix(this.machineId), () => {
      trace('agent.watch');
      trigger();
    });
    this.dockerEvents = watchContainerEvents(this.docker, this.machineId, trigger, this.options.log);
    this.resyncTimer = setInterval(trigger, this.options.resyncIntervalMs ?? 5_000);
    await this.reconcile();
    await this.jobs.start();
  }

  /** Resolves once a pass that started after this call has ended. */
  reconcile(): Promise<void> {
    return this.passes.add(RECONCILE);
  }

  statuses(): UnitStatus[] {
    return this.reporter.statuses();
  }

  jobStdin(id: string, secret: string): Promise<Writable> {
    return this.jobs.stdinOf(id, secret);
  }

  async readiness(): Promise<{ machine: string; docker: string }> {
    await this.options.store.ping();
    const engine = await this.checkDocker();
    if (!engine.reachable) throw new Error(engineUnreachableAdvice(this.options.dockerHost, engine.error ?? 'no reason given'));
    return { machine: this.machineId, docker: engine.version ?? 'unknown' };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.resyncTimer);
    this.dockerEvents?.close();
    await this.assignmentWatch?.close();
    await this.jobs.close();
    await this.components?.close();
    await this.passes.close();
    await this.units.settled();
    // Before the lease is let go: the scheduler must find the machine away, not lost, when the lease runs out.
    await withTimeout(this.registration.away('its agent stopped'), AWAY_WRITE_TIMEOUT_MS, 'the store').catch((error: unknown) =>
      this.options.log.warn({ err: error, machine: this.machineId }, 'could not say the machine is away; its units move once its lease runs out'),
    );
    await this.leasedKeys.close({ revoke: false });
  }

  /** Ports no unit here may take besides PLATFORM_PORTS: this process's roles' and every announced role's. */
  private platformPorts(): number[] {
    return [...this.ownPlatformPorts, ...announcedPorts((this.components?.values() ?? []).map((entry) => entry.value))];
  }

  /** Asks for a pass in `ms`; only the earliest pending wake-up is kept, later ones are re-asked by that pass. */
  private wakeIn(ms: number): void {
    if (!this.closed) this.passes.addAfter(RECONCILE, ms);
  }

  private checkDocker(): Promise<Machine['docker']> {
    return this.engine.check();
  }

  private async reconcileOnce(): Promise<void> {
    trace('agent.pass');
    // Independent round trips, at once: the store's assignments, the engine's health and this
    // machine's containers (used only when the engine is reachable; bounded like the health check).
    const [listed, engine, containers] = await Promise.all([
      this.options.store.list(assignmentPrefix(this.machineId)),
      this.checkDocker(),
      withTimeout(listUnitContainers(this.docker, this.machineId), engineCheckTimeoutMs, 'Docker engine').then(
        (list) => ({ list }),
        (error: unknown) => ({ error }),
      ),
    ]);
    trace('agent.read', `${listed.length}`);
    const { accepted: assignments, refused } = this.assignmentCheck.check(listed);
    const wanted = new Set(assignments.map(slotOf));
    // Reported first: a container an assignment had before it was refused is stopped at once, not drained.
    const refusedSlots = await this.reportRefused(refused);
    if (!engine.reachable) await this.reportEngineDown(assignments, engine.error ?? 'no reason given');
    else if ('error' in containers) throw containers.error;
    else {
      await this.learnEngine();
      await this.reconcileUnits(assignments, wanted, containers.list);
    }
    const keep = new Set([...wanted, ...refusedSlots, ...this.units.retiringSlots()]);
    // Memory first: a probe of a slot that goes must not write its status again after it is forgotten.
    this.units.forgetExcept(keep);
    await Promise.all(this.reporter.slots().filter((slot) => !keep.has(slot)).map((slot) => this.reporter.forget(slot)));
    await this.registration.update(engine, assignments.length, await this.capacity(engine.reachable));
  }

  /** The engine's resources and data root, once: the data root before any unit status can name it. */
  private async learnEngine(): Promise<void> {
    if (this.engineResources) return;
    this.engineResources = await withTimeout(this.docker.info() as Promise<EngineResources>, engineCheckTimeoutMs, 'Docker engine').catch(() => undefined);
    if (this.engineResources?.DockerRootDir) this.reporter.hideHostDir(this.engineResources.DockerRootDir);
  }

  private async capacity(reachable: boolean): Promise<Pick<Machine['capacity'], 'memoryMB' | 'cpus'>> {
    const settings = this.options.resources ?? { reserveMemoryMB: defaultReserve.memoryMB, reserveCpus: defaultReserve.cpus };
    const capped = settings.capacityMemoryMB !== undefined && settings.capacityCpus !== undefined;
    if (reachable && !capped) await this.learnEngine();
    return unitCapacity(this.engineResources, settings);
  }

  private async reconcileUnits(assignments: Assignment[], wanted: ReadonlySet<string>, containers: UnitContainer[]): Promise<void> {
    const network = this.options.network ?? 'bridge';
    const units = this.units;
    const plan = planReplacements({ assignments, containers, network, isReady: (c) => units.isReady(c), isStopping: (c) => units.isStopping(c) });
    const taken = {
      // Whatever network mode a container has, the host port it holds is not free for a unit on host networking.
      ports: new Set(containers.map(hostPortOf).filter((port): port is number => port !== undefined)),
      names: new Set(containers.map((container) => container.name)),
    };
    const log = this.options.log;
    for (const { container, handedOver } of plan.retire) this.units.retire(container, handedOver);
    // Units are independent: one unit's slow pull must not hold up the others.
    await Promise.all(
      plan.slots.map((slot) =>
        this.units
          .reconcile(slot, taken)
          .catch((error) => log.warn({ unit: slot.assignment.unit, reason: dockerErrorMessage(error) }, 'could not reconcile unit')),
      ),
    );
    await this.restoreUnitNames(containers, wanted);
  }

  /**
   * During a rolling update the new container of a unit takes a longer name while the old one
   * still holds the unit's; once the old one is gone, the survivor gets the unit's name back.
   */
  private async restoreUnitNames(containers: UnitContainer[], wanted: ReadonlySet<string>): Promise<void> {
    const holders = new Set(containers.filter((c) => c.name === c.unit).map((c) => c.unit));
    // A container on the other network mode is being replaced: the name waits for its replacement.
    const renamable = containers.filter(
      (c) => c.name !== c.unit && !holders.has(c.unit) && wanted.has(slotOf(c)) && c.network === (this.options.network ?? 'bridge') && !this.units.isStopping(c),
    );
    for (const container of renamable) await canonicalName(this.docker, container);
  }

  /** Refused assignments create nothing; each one that names its slot says why in its status. Returns those slots. */
  private async reportRefused(refused: RefusedAssignment[]): Promise<string[]> {
    const named = refused.filter((entry): entry is Required<RefusedAssignment> => entry.slot !== undefined);
    await Promise.all(
      named.map(({ slot, refusal }) =>
        this.reporter.report(observedStatus(slot, this.machineId, 0, { active: 'failed', sub: 'failed' }, { error: refusal, errorKind: 'refused' })),
      ),
    );
    return named.map(({ slot }) => slotOf(slot));
  }

  private async reportEngineDown(assignments: Assignment[], reason: string): Promise<void> {
    const failure: UnitFailure = { error: `Docker engine unreachable: ${reason}`, errorKind: 'engine-unreachable' };
    await Promise.all(
      assignments.map((assignment) =>
        this.reporter.report(observedStatus(assignment, this.machineId, 0, { active: 'failed', sub: 'failed' }, failure)),
      ),
    );
  }
}
