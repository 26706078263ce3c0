import { trace } from '../../trace.js';
import type Docker from 'dockerode';
import type { FastifyBaseLogger } from 'fastify';
import type { Assignment, UnitSlot } from '../../schemas/cluster.js';
import { isRunning, slotOf } from '../../units.js';
import { RestartBackoff } from './backoff.js';
import { containerCreateOptions, type NetworkMode } from './container-spec.js';
import { StartRefused, createAndStart, ensureImage, hostPortOf, inspectExit, runningPid, startContainer, stopAndRemove, type ContainerExit, type UnitContainer } from './containers.js';
import { listenerOf } from './listening-socket.js';
import { dockerErrorMessage } from './docker-client.js';
import { chooseUnitPorts } from './ports.js';
import { UnitRefusal, unitMounts } from './unit-volumes.js';
import { passesProbe } from './readiness-probe.js';
import type { SlotPlan } from './replacement-plan.js';
import type { CredentialLookup } from '../../auth/registry-credentials.js';
import type { UnitLogRotation } from '../../config.js';
import type { ObservedStatus, UnitFailure, UnitStatusReporter } from './status-reporter.js';

// Makes one unit slot's container match its assignment, one step per pass: create a missing one,
// restart an exited one after its backoff, probe a new one until it serves, and report what it
// sees. Slots no assignment wants are drained and stopped in the background. Every step is safe
// to repeat; the next pass continues where this one stopped. While a container on the other
// network mode stands in for the slot (replacement-plan.ts), it is what the slot's status
// reports, until the replacement passes its probe.
//
// A probe that something answers on the unit's port is not enough: the unit is running only once a
// process of its own container listens there (listening-socket.ts). On host networking a port held
// by another process (a platform role, a leftover server) answers the probe while the unit
// crash-loops on `bind: Address already in use`; that unit is never reported running.

export interface UnitReconcilerOptions {
  docker: Docker;
  machineId: string;
  network: NetworkMode;
  unitHost: string;
  /** Grace for containers that carry none in their labels. */
  stopGraceSeconds: number;
  /** How long a unit is announced as draining before it is sent SIGTERM. */
  drainSeconds: number;
  /** How much output of each unit the engine keeps. */
  unitLogs: UnitLogRotation;
  /** Ports the platform listens on besides PLATFORM_PORTS (asked at each create): never a unit's. */
  platformPorts: () => readonly number[];
  /** `uid[:gid]` units on host networking run as. */
  hostNetworkUser: string;
  /** The memory limit of units declared without one; undefined: none. */
  defaultMemoryMB?: number;
  reporter: UnitStatusReporter;
  /** Registry logins for pulls (src/auth/registry-credentials.ts). */
  credentials?: CredentialLookup;
  /** Asks for another pass in `ms` (a backoff ending, a port to probe again). */
  wakeIn: (ms: number) => void;
  /** Keeps a failed container's last output before it is restarted (failed-output.ts). */
  keepFailedOutput?: (assignment: Assignment, containerId: string | undefined, exit: ContainerExit) => Promise<void>;
  log: FastifyBaseLogger;
}

/** What the agent remembers of a slot between passes. */
interface SlotMemory {
  backoff: RestartBackoff;
  restarts: number;
  /** The container seen passing its probe since it last started. */
  readyContainer?: string;
  /** The container a background probe loop is waiting on, if any. */
  probing?: string;
  /** Until then a just-started container that has not passed its probe is not reported as started (QUIET_START_MS). */
  quietUntil?: number;
  /** A stand-in serves the slot: only this slot's container passing its probe is reported. */
  replacing?: boolean;
  /** The container last seen probed on a port where another process, not it, listens (logged once, then reported while probing). */
  foreignListener?: string;
  /**
   * The container found running when this agent started (it served then): its probe alone gets it
   * reported running again, and who listens on its port is checked right after (verifyAdopted).
   */
  adopted?: string;
}

/** What this machine's containers hold, which a new container must not take. */
export interface TakenByContainers {
  /** Host ports (host networking); a chosen one is added. */
  ports: Set<number>;
  names: ReadonlySet<string>;
}

/** What one pass saw of a slot, apart from a failure or wait (which comes with its kind). */
export type UnitState = Pick<ObservedStatus, 'active' | 'sub' | 'address' | 'containerId'>;

const probeRetryMs = 500;
/**
 * How long a passed image check is trusted: images are pinned by digest, and a deploy should not
 * wait for an inspect of what it found a minute ago. An operator removing the image meanwhile
 * makes a create fail with 404, which ends the trust at once; the unit's retry checks again.
 */
const IMAGE_CHECK_TTL_MS = 5 * 60_000;
// A fresh process usually listens within tens of milliseconds: probe often at first (10, 15, 22,
// 34 ms, then every 50 ms for about two seconds), then once a second. A probe is one loopback
// connect (or GET), so the early ones cost little next to noticing readiness 100 ms late.
const FREQUENT_PROBES = 45;
const probeDelayMs = (failedProbes: number): number => (failedProbes < FREQUENT_PROBES ? Math.min(10 * 1.5 ** failedProbes, 50) : 1000);
/**
 * A container that serves within this long of its start goes from the status it was created with
 * straight to running: reporting it started first would be one more store write (and a watch event
 * for every role) per unit while the other units of a deploy are still being created, on the same
 * cores. One that takes longer is reported started, with its address, after this.
 */
const QUIET_START_MS = 100;

export class UnitReconciler {
  private readonly memory = new Map<string, SlotMemory>();
  /** The containers standing in for slots while their replacements start, by slot. */
  private readonly standIns = new Map<string, SlotMemory>();
  /** Whether the agent said once that /proc does not show it its containers' sockets. */
  private unseenLogged = false;
  /** A unit container's own listening socket was seen in /proc: this agent shares the containers' PID namespace. */
  private seesContainers = false;
  /** Containers being drained and stopped, by container id, with their slot. */
  private readonly stopping = new Map<string, { slot: string; done: Promise<void> }>();
  /** Image checks under way or passed in the last seconds, by image reference. */
  private readonly images = new Map<string, Promise<void>>();

  constructor(private readonly options: UnitReconcilerOptions) {}

  /**
   * Brings `assignment`'s slot one step closer to running. `taken` is what this machine's other
   * containers hold: host ports, and names (during a rolling update the old container of the unit
   * holds its name).
   */
  async reconcile({ assignment, container, run, standIn }: SlotPlan, taken: TakenByContainers): Promise<void> {
    const slot = slotOf(assignment);
    const adopting = !this.memory.has(slot) && container?.state === 'running';
    const memory = this.memoryOf(slot);
    // A running container found (after a restart) served before: it is reported running once probed, not starting first.
    if (adopting) {
      memory.quietUntil = Date.now() + QUIET_START_MS;
      memory.adopted = container.id;
    }
    memory.replacing = standIn !== undefined;
    if (standIn) await this.observeStandIn(assignment, slot, standIn);
    else this.dropStandIn(slot);
    if (!run) return;
    if (!container) return this.create(assignment, memory, taken);
    if (container.state === 'running') return this.observeRunning(assignment, memory, container);
    return this.restartStopped(assignment, memory, container);
  }

  /** Whether the container is being drained and stopped. */
  isStopping(container: UnitContainer): boolean {
    return this.stopping.has(container.id);
  }

  /** Whether the container has passed its readiness probe since it (or this agent) started. */
  isReady(container: UnitContainer): boolean {
    const slot = slotOf(container);
    return this.memory.get(slot)?.readyContainer === container.id || this.standIns.get(slot)?.readyContainer === container.id;
  }

  /**
   * Retires a container in the background: its status says deactivating/running for the drain
   * period (gateways stop sending it new requests, in-flight ones finish), then it gets SIGTERM,
   * its grace period, SIGKILL, and its status goes. `handedOver`: the slot's status names the
   * container's replacement already (gateways are moving to it), so the status stays and only the
   * drain period is waited out.
   */
  retire(container: UnitContainer, handedOver = false): void {
    if (this.stopping.has(container.id)) return;
    const slot = slotOf(container);
    // A probe still running must not report a unit that is going away as running.
    for (const memory of [this.memory.get(slot), this.standIns.get(slot)]) if (memory?.probing === container.id) memory.probing = undefined;
    const done = (handedOver ? this.drainHandedOver(container, slot) : this.drainAndStop(container, slot))
      .catch((error) => this.options.log.warn({ unit: container.unit, reason: dockerErrorMessage(error) }, 'could not stop unit'))
      .finally(() => {
        this.stopping.delete(container.id);
        this.options.wakeIn(0);
      });
    this.stopping.set(container.id, { slot, done });
  }

  /** Slots whose container is being retired: their status stays until it has stopped. */
  retiringSlots(): Set<string> {
    return new Set([...this.stopping.values()].map((entry) => entry.slot));
  }

  /** Resolves when every retirement under way has finished. */
  async settled(): Promise<void> {
    await Promise.all([...this.stopping.values()].map((entry) => entry.done));
  }

  /** Drops what is remembered of slots that are no longer assigned. */
  forgetExcept(slots: ReadonlySet<string>): void {
    for (const [slot, memory] of this.memory) {
      if (slots.has(slot)) continue;
      memory.probing = undefined;
      this.memory.delete(slot);
    }
    for (const slot of this.standIns.keys()) if (!slots.has(slot)) this.dropStandIn(slot);
  }

  /** Reports the container standing in for the slot as any running unit (probed, then running). */
  private async observeStandIn(assignment: Assignment, slot: string, standIn: UnitContainer): Promise<void> {
    let memory = this.standIns.get(slot);
    if (!memory) {
      memory = { backoff: new RestartBackoff(), restarts: 0, quietUntil: Date.now() + QUIET_START_MS, adopted: standIn.id };
      this.standIns.set(slot, memory);
    }
    if (standIn.state === 'running') await this.observeRunning(assignment, memory, standIn);
  }

  private dropStandIn(slot: string): void {
    const memory = this.standIns.get(slot);
    if (memory) memory.probing = undefined;
    this.standIns.delete(slot);
  }

  /** A replaced container: the drain period (the status names its replacement), then stopped. */
  private async drainHandedOver(container: UnitContainer, slot: string): Promise<void> {
    this.options.log.info({ unit: container.unit, container: container.id, network: container.network }, 'replaced unit container; stopping the old one after the drain period');
    if (container.state === 'running' && this.options.drainSeconds > 0) await new Promise((resolve) => setTimeout(resolve, this.options.drainSeconds * 1000));
    await stopAndRemove(this.options.docker, container.id, container.stopGraceSeconds ?? this.options.stopGraceSeconds);
    this.dropStandIn(slot);
  }

  private async drainAndStop(container: UnitContainer, slot: string): Promise<void> {
    const status = this.options.reporter.get(slot);
    // Only a unit that served is drained: one that never became active/running (still starting,
    // failing its health check) has no requests to finish, and it goes at once.
    if (status && isRunning(status) && container.state === 'running' && this.options.drainSeconds > 0) {
      const { updatedAt: _updatedAt, ...observed } = status;
      await this.options.reporter.report({ ...observed, active: 'deactivating', sub: 'running' });
      await new Promise((resolve) => setTimeout(resolve, this.options.drainSeconds * 1000));
    }
    await stopAndRemove(this.options.docker, container.id, container.stopGraceSeconds ?? this.options.stopGraceSeconds);
    await this.options.reporter.forget(slot);
    const memory = this.memory.get(slot);
    if (memory) memory.probing = undefined;
    this.memory.delete(slot);
    this.dropStandIn(slot);
  }

  /**
   * Makes sure the image is on the engine, once for every unit that asks meanwhile: the units of a
   * deploy share one check (and one pull), instead of ten. Images are pinned by digest, so a
   * check that passed stays true for a while; a failed one is forgotten at once.
   */
  private imageOnce(image: string): Promise<void> {
    let present = this.images.get(image);
    if (!present) {
      present = ensureImage(this.options.docker, image, this.options.credentials);
      this.images.set(image, present);
      const forget = () => this.images.get(image) === present && this.images.delete(image);
      present.then(() => setTimeout(forget, IMAGE_CHECK_TTL_MS).unref(), forget);
    }
    return present;
  }

  private memoryOf(slot: string): SlotMemory {
    let known = this.memory.get(slot);
    if (!known) {
      known = { backoff: new RestartBackoff(), restarts: 0 };
      this.memory.set(slot, known);
    }
    return known;
  }

  private async create(assignment: Assignment, memory: SlotMemory, taken: TakenByContainers): Promise<void> {
    const { docker } = this.options;
    if (await this.waitingForRetry(assignment, memory)) return;
    memory.backoff.retrying();
    // Reported while the container is made (the reporter keeps the slot's writes in order).
    const starting = this.report(assignment, memory, { active: 'activating', sub: 'start-pre' });
    try {
      await this.imageOnce(assignment.image);
    } catch (error) {
      await starting;
      return this.fail(assignment, memory, { error: `image pull failed: ${dockerErrorMessage(error)}`, errorKind: 'image-pull' });
    }
    let containerId: string;
    let listening: number | undefined;
    try {
      const mounts = await unitMounts(docker, assignment, this.options.machineId);
      const { network, platformPorts, hostNetworkUser } = this.options;
      const ports = await chooseUnitPorts(assignment, network, taken.ports, platformPorts());
      const user = network === 'host' ? { user: hostNetworkUser } : {};
      const { defaultMemoryMB } = this.options;
      const spec = { assignment, machineId: this.options.machineId, network, logs: this.options.unitLogs, mounts, ...user, ...ports, defaultMemoryMB };
      const fallbackName = `${assignment.unit}.${assignment.spec}.${this.options.machineId}`;
      // When one of this machine's containers holds the unit's name, the create would only be refused (409).
      containerId = await createAndStart(docker, containerCreateOptions(spec), fallbackName, taken.names.has(assignment.unit));
      // With host networking the unit's port is known now: probe at once, not after the next pass.
      listening = this.options.network === 'host' ? ports.port : undefined;
    } catch (error) {
      if ((error as { statusCode?: number }).statusCode === 404) this.images.delete(assignment.image);
      await starting;
      if (error instanceof UnitRefusal) return this.fail(assignment, memory, { error: error.message, errorKind: 'refused' });
      const failure: UnitFailure = { error: `container failed to start: ${dockerErrorMessage(error)}`, errorKind: 'container-start' };
      // The engine's answer (an HTTP error from it) is the unit's last output; the agent's own errors are only its status.
      const fromEngine = error instanceof StartRefused || (error as { statusCode?: number }).statusCode !== undefined;
      if (fromEngine) await this.keepOutput(assignment, error instanceof StartRefused ? error.containerId : undefined, { ranForMs: 0, failure, engineError: dockerErrorMessage(error) });
      return this.fail(assignment, memory, failure);
    }
    await starting;
    memory.readyContainer = undefined;
    // A unit serving within QUIET_START_MS goes straight to running; passes meanwhile leave it be.
    if (listening !== undefined) {
      memory.quietUntil = Date.now() + QUIET_START_MS;
      this.probeUntilReady(assignment, memory, containerId, { host: listening, unit: listening }, true);
    } else await this.report(assignment, memory, { active: 'activating', sub: 'start-pre', containerId });
    this.options.wakeIn(0);
  }

  private async observeRunning(assignment: Assignment, memory: SlotMemory, container: UnitContainer): Promise<void> {
    const hostPort = hostPortOf(container);
    if (!hostPort) {
      this.options.wakeIn(probeRetryMs);
      // An engine without a bridge network never publishes one; the reason names the way out (issue 31).
      const waiting: UnitFailure = { error: 'waiting for Docker to publish the unit port (an engine without a bridge network never does: --network host)', errorKind: 'port-publish' };
      return this.report(assignment, memory, { active: 'activating', sub: 'start-pre', containerId: container.id }, waiting);
    }
    const address = `${this.options.unitHost}:${hostPort}`;
    if (memory.readyContainer !== container.id) {
      this.probeUntilReady(assignment, memory, container.id, { host: hostPort, unit: container.port });
      if (memory.probing === container.id && Date.now() < (memory.quietUntil ?? 0)) return;
      return this.reportProbing(assignment, memory, container.id, address);
    }
    return this.report(assignment, memory, { active: 'active', sub: 'running', address, containerId: container.id });
  }

  /** A started container that has not passed its probe yet. */
  private reportProbing(assignment: Assignment, memory: SlotMemory, containerId: string, address: string): Promise<void> {
    const waiting: UnitFailure | undefined =
      memory.foreignListener === containerId
        ? { error: `another process answers at ${address}: waiting for the unit's own container to listen there`, errorKind: 'health-check' }
        : assignment.healthCheck
          ? { error: `waiting for GET ${assignment.healthCheck.path} to answer 2xx`, errorKind: 'health-check' }
          : undefined;
    return this.report(assignment, memory, { active: 'activating', sub: 'start-pre', address, containerId }, waiting);
  }

  /**
   * Probes a started container in the background, at once, often at first and then backing off,
   * and reports it running as soon as it serves: readiness reaches the store within milliseconds,
   * without waiting for a whole reconcile pass (engine check, container list) to notice it. A
   * new container, a stopped one or a slot no longer assigned ends the loop (they clear
   * `probing`), and with it the report: the check and the report are in one tick, so a pass's
   * later report of that slot always comes after this one. With `unreported` (a container just
   * created) the container is reported as probing once a probe fails after its quiet start.
   * `ports`: where it is probed (`host`) and its `PORT` in its own network (`unit`).
   */
  private probeUntilReady(assignment: Assignment, memory: SlotMemory, containerId: string, ports: { host: number; unit: number }, unreported = false): void {
    if (memory.probing === containerId) return;
    memory.probing = containerId;
    const address = `${this.options.unitHost}:${ports.host}`;
    void (async () => {
      for (let attempt = 0; memory.probing === containerId; attempt++) {
        if ((await passesProbe(this.options.unitHost, ports.host, assignment.healthCheck)) && (await this.listensItself(assignment, memory, containerId, ports.unit))) {
          if (memory.probing !== containerId) return;
          trace('agent.ready', assignment.unit);
          memory.probing = undefined;
          memory.readyContainer = containerId;
          await this.report(assignment, memory, { active: 'active', sub: 'running', address, containerId });
          if (memory.adopted === containerId) this.verifyAdopted(assignment, memory, containerId, ports.unit);
          // A replacement ready: the next pass retires the container it replaces.
          if (memory.replacing) this.options.wakeIn(0);
          return;
        }
        // Unless a pass has reported the container meanwhile (with its address). Not awaited: the next
        // probe must not wait for the write's round trip (the reporter keeps the order).
        if (unreported && Date.now() >= (memory.quietUntil ?? 0) && memory.probing === containerId) {
          unreported = false;
          if (this.options.reporter.get(slotOf(assignment))?.containerId !== containerId) void this.reportProbing(assignment, memory, containerId, address).catch(() => undefined);
        }
        await new Promise((resolve) => setTimeout(resolve, probeDelayMs(attempt)));
      }
    })().catch((error) => this.options.log.warn({ unit: assignment.unit, reason: dockerErrorMessage(error) }, 'could not report unit ready'));
  }

  /**
   * Whether the container runs and one of its processes listens on `port`. A container found running
   * when the agent started listened before, and is taken on its probe alone at first (verifyAdopted
   * checks it right after it is reported): the check reads the
   * kernel's socket tables, tens of milliseconds on a busy machine (far more under load, with
   * thousands of connections in them), and its units must be reported running again within
   * QUIET_START_MS or they leave the routes (restarts.test: 503s through HAProxy across `platform up`
   * restarts). The gateway still never routes one to a platform port. An agent that cannot see
   * its containers' processes in /proc (it runs in a PID namespace of its own, or not as root)
   * trusts the probe, as before, and says so once: the gateway still never routes to a platform
   * port (route-plan.ts), but a port held by another process would pass.
   */
  private async listensItself(assignment: Assignment, memory: SlotMemory, containerId: string, port: number): Promise<boolean> {
    if (memory.adopted === containerId) return true;
    const pid = await runningPid(this.options.docker, containerId).catch(() => undefined);
    if (pid === undefined) return false;
    let listener = await listenerOf(pid, containerId, port);
    // A crash right after the inspect: not listening. Still running with that process: /proc here is
    // not the containers' PID namespace, unless this agent has seen a unit's own socket in it
    // before (then Docker has only not yet noticed the exit, as under load it may take seconds).
    if (listener === 'gone') listener = !this.seesContainers && (await runningPid(this.options.docker, containerId).catch(() => undefined)) === pid ? 'unseen' : 'other';
    if (listener === 'own') this.seesContainers = true;
    if (listener === 'unseen') {
      if (!this.unseenLogged) this.options.log.warn({ unit: assignment.unit, pid }, "cannot see unit containers' sockets in /proc (run the agent as root in the host's PID namespace): a unit counts as running once its probe passes");
      this.unseenLogged = true;
      return true;
    }
    if (listener === 'other' && memory.foreignListener !== containerId) {
      memory.foreignListener = containerId;
      this.options.log.warn({ unit: assignment.unit, container: containerId, port }, "another process answers on the unit's port, not the unit's container: the unit is not running");
    }
    return listener === 'own';
  }

  /**
   * An adopted container was reported running on its probe alone (listensItself): the socket check
   * follows once it is reported, off the path the routes wait on. If another process answers on
   * its port, the unit stops counting as running (the next pass probes it as a new container, and
   * reports it probing with the other process named), so no gateway keeps routing to that process.
   */
  private verifyAdopted(assignment: Assignment, memory: SlotMemory, containerId: string, port: number): void {
    void (async () => {
      if (memory.adopted !== containerId) return;
      memory.adopted = undefined;
      if (await this.listensItself(assignment, memory, containerId, port)) return;
      if (memory.readyContainer !== containerId) return;
      memory.readyContainer = undefined;
      this.options.wakeIn(0);
    })().catch((error: unknown) => this.options.log.warn({ unit: assignment.unit, reason: dockerErrorMessage(error) }, 'could not check who listens on an adopted unit\'s port'));
  }

  private async restartStopped(assignment: Assignment, memory: SlotMemory, container: UnitContainer): Promise<void> {
    memory.readyContainer = undefined;
    memory.probing = undefined;
    // Started again by this agent: what listens on its port is checked like a new container's.
    memory.adopted = undefined;
    const exit = await inspectExit(this.options.docker, container.id);
    memory.backoff.recordFailure(exit.failure, Date.now(), exit.ranForMs);
    // Before the restart: its output would run on into the next run's, and a revert removes the container.
    await this.keepOutput(assignment, container.id, exit);
    if (await this.waitingForRetry(assignment, memory, container.id)) return;
    memory.backoff.retrying();
    memory.restarts += 1;
    this.options.log.info({ unit: assignment.unit, restarts: memory.restarts, after: memory.backoff.lastFailure?.error }, 'restarting unit container');
    try {
      await startContainer(this.options.docker, container.id);
    } catch (error) {
      const failure: UnitFailure = { error: `container failed to start: ${dockerErrorMessage(error)}`, errorKind: 'container-start' };
      await this.keepOutput(assignment, container.id, { ranForMs: 0, failure, engineError: dockerErrorMessage(error) });
      return this.fail(assignment, memory, failure, container.id);
    }
    await this.report(assignment, memory, { active: 'activating', sub: 'start-pre', containerId: container.id });
    this.options.wakeIn(0);
  }

  /** Keeps the failed container's last output, or the engine's refusal of it (failed-output.ts); a failure to keep it is only logged. */
  private async keepOutput(assignment: Assignment, containerId: string | undefined, exit: ContainerExit): Promise<void> {
    await this.options.keepFailedOutput?.(assignment, containerId, exit).catch((error: unknown) =>
      this.options.log.warn({ unit: assignment.unit, reason: dockerErrorMessage(error) }, "could not keep the failed unit's output"),
    );
  }

  /** While a failed unit waits out its backoff it reports failed/auto-restart with the failure. */
  private async waitingForRetry(assignment: Assignment, memory: SlotMemory, containerId?: string): Promise<boolean> {
    const waitMs = memory.backoff.waitMs(Date.now());
    if (waitMs === 0) return false;
    this.options.wakeIn(waitMs);
    await this.report(assignment, memory, { active: 'failed', sub: 'auto-restart', ...(containerId ? { containerId } : {}) }, memory.backoff.lastFailure);
    return true;
  }

  private async fail(assignment: Assignment, memory: SlotMemory, failure: UnitFailure, containerId?: string): Promise<void> {
    this.options.log.warn({ unit: assignment.unit, release: assignment.release, reason: failure.error, kind: failure.errorKind }, 'unit failed');
    memory.backoff.recordFailure(failure, Date.now());
    await this.waitingForRetry(assignment, memory, containerId);
  }

  /**
   * The slot's status, from the container that serves it: while a stand-in does, the replacement
   * reports only once it passes its probe (its start, failures and retries are logged, not
   * reported: the unit is serving), and from then on the stand-in no longer reports.
   */
  private report(assignment: Assignment, memory: SlotMemory, state: UnitState, failure?: UnitFailure): Promise<void> {
    const slot = slotOf(assignment);
    if (memory.replacing && !(state.active === 'active' && state.sub === 'running')) return Promise.resolve();
    if (this.standIns.get(slot) === memory && this.memory.get(slot)?.readyContainer !== undefined) return Promise.resolve();
    return this.options.reporter.report(observedStatus(assignment, this.options.machineId, memory.restarts, state, failure));
  }
}

export function observedStatus(
  assignment: UnitSlot,
  machineId: string,
  restarts: number,
  state: UnitState,
  failure?: UnitFailure,
): ObservedStatus {
  return {
    unit: assignment.unit,
    service: assignment.service,
    instance: assignment.instance,
    machine: machineId,
    release: assignment.release,
    spec: assignment.spec,
    image: assignment.image,
    active: state.active,
    sub: state.sub,
    ...(state.address ? { address: state.address } : {}),
    ...(state.containerId ? { containerId: state.containerId } : {}),
    restarts,
    ...failure,
  };
}
