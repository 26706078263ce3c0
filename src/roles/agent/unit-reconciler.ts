import type Docker from 'dockerode';
import type { FastifyBaseLogger } from 'fastify';
import type { Assignment } from '../../schemas/cluster.js';
import { RestartBackoff } from './backoff.js';
import { containerCreateOptions, type NetworkMode } from './container-spec.js';
import { createAndStart, ensureImage, inspectExit, startContainer, stopAndRemove, type UnitContainer } from './containers.js';
import { dockerErrorMessage } from './docker-client.js';
import { chooseUnitPorts } from './ports.js';
import { acceptsConnections } from './readiness-probe.js';
import type { ObservedStatus, UnitStatusReporter } from './status-reporter.js';

// Makes one unit's container match its assignment, one step per pass: replace a container of
// another release, create a missing one, restart an exited one after its backoff, and report
// what it sees. Every step is safe to repeat; the next pass continues where this one stopped.

export interface UnitReconcilerOptions {
  docker: Docker;
  machineId: string;
  network: NetworkMode;
  unitHost: string;
  stopGraceSeconds: number;
  reporter: UnitStatusReporter;
  /** Asks for another pass in `ms` (a backoff ending, a port to probe again). */
  wakeIn: (ms: number) => void;
  log: FastifyBaseLogger;
}

/** What the agent remembers of a unit's current release between passes. */
interface UnitMemory {
  release: number;
  image: string;
  backoff: RestartBackoff;
  restarts: number;
  /** The container seen accepting connections since it last started. */
  readyContainer?: string;
  /** Failed connection probes since the container started: the next probe waits longer. */
  probes: number;
}

const probeRetryMs = 500;
// A fresh process usually listens within tens of milliseconds: probe soon, then back off.
const probeDelayMs = (failedProbes: number): number => Math.min(25 * 2 ** failedProbes, 1000);

export class UnitReconciler {
  private readonly memory = new Map<string, UnitMemory>();

  constructor(private readonly options: UnitReconcilerOptions) {}

  /** Brings `assignment`'s unit one step closer to running; `takenPorts` are host ports other units hold. */
  async reconcile(assignment: Assignment, container: UnitContainer | undefined, takenPorts: Set<number>): Promise<void> {
    const memory = this.memoryOf(assignment);
    let previousPort: number | undefined;
    if (container && (container.release !== assignment.release || container.image !== assignment.image)) {
      this.options.log.info({ unit: assignment.unit, from: container.release, to: assignment.release }, 'replacing unit container');
      await this.report(assignment, memory, { active: 'activating', sub: 'start-pre' });
      await stopAndRemove(this.options.docker, container.id, this.options.stopGraceSeconds);
      previousPort = this.options.network === 'host' ? container.port : undefined;
      container = undefined;
    }
    if (!container) return this.create(assignment, memory, takenPorts, previousPort);
    if (container.state === 'running') return this.observeRunning(assignment, memory, container);
    return this.restartStopped(assignment, memory, container);
  }

  /** Stops and removes a container no assignment wants, and withdraws its status. */
  async remove(container: UnitContainer): Promise<void> {
    this.options.log.info({ unit: container.unit, release: container.release }, 'removing unassigned unit container');
    await stopAndRemove(this.options.docker, container.id, this.options.stopGraceSeconds);
    await this.options.reporter.forget(container.unit);
    this.memory.delete(container.unit);
  }

  /** Drops what is remembered of units that are no longer assigned. */
  forgetExcept(units: ReadonlySet<string>): void {
    for (const unit of this.memory.keys()) if (!units.has(unit)) this.memory.delete(unit);
  }

  private memoryOf(assignment: Assignment): UnitMemory {
    const known = this.memory.get(assignment.unit);
    if (known && known.release === assignment.release && known.image === assignment.image) return known;
    const fresh: UnitMemory = { release: assignment.release, image: assignment.image, backoff: new RestartBackoff(), restarts: 0, probes: 0 };
    this.memory.set(assignment.unit, fresh);
    return fresh;
  }

  private async create(assignment: Assignment, memory: UnitMemory, takenPorts: Set<number>, previousPort?: number): Promise<void> {
    const { docker } = this.options;
    if (await this.waitingForRetry(assignment, memory)) return;
    memory.backoff.retrying();
    await this.report(assignment, memory, { active: 'activating', sub: 'start-pre' });
    try {
      await ensureImage(docker, assignment.image);
    } catch (error) {
      return this.fail(assignment, memory, `image pull failed: ${dockerErrorMessage(error)}`);
    }
    let containerId: string;
    try {
      const ports = await chooseUnitPorts(assignment, this.options.network, takenPorts, previousPort);
      const spec = { assignment, machineId: this.options.machineId, network: this.options.network, ...ports };
      containerId = await createAndStart(docker, containerCreateOptions(spec), this.options.machineId);
    } catch (error) {
      return this.fail(assignment, memory, `container failed to start: ${dockerErrorMessage(error)}`);
    }
    memory.readyContainer = undefined;
    memory.probes = 0;
    this.options.log.info({ unit: assignment.unit, release: assignment.release, containerId }, 'unit container started');
    await this.report(assignment, memory, { active: 'activating', sub: 'start-pre', containerId });
    this.options.wakeIn(0);
  }

  private async observeRunning(assignment: Assignment, memory: UnitMemory, container: UnitContainer): Promise<void> {
    const hostPort = this.options.network === 'host' ? container.port : container.publishedPort;
    if (!hostPort) {
      this.options.wakeIn(probeRetryMs);
      return this.report(assignment, memory, { active: 'activating', sub: 'start-pre', containerId: container.id, error: 'waiting for Docker to publish the unit port' });
    }
    const address = `${this.options.unitHost}:${hostPort}`;
    if (memory.readyContainer !== container.id) {
      if (!(await acceptsConnections(this.options.unitHost, hostPort))) {
        this.options.wakeIn(probeDelayMs(memory.probes++));
        return this.report(assignment, memory, { active: 'activating', sub: 'start-pre', address, containerId: container.id });
      }
      memory.readyContainer = container.id;
      memory.probes = 0;
    }
    return this.report(assignment, memory, { active: 'active', sub: 'running', address, containerId: container.id });
  }

  private async restartStopped(assignment: Assignment, memory: UnitMemory, container: UnitContainer): Promise<void> {
    memory.readyContainer = undefined;
    memory.probes = 0;
    const exit = await inspectExit(this.options.docker, container.id);
    memory.backoff.recordFailure(exit.reason, Date.now(), exit.ranForMs);
    if (await this.waitingForRetry(assignment, memory, container.id)) return;
    memory.backoff.retrying();
    memory.restarts += 1;
    this.options.log.info({ unit: assignment.unit, restarts: memory.restarts, after: memory.backoff.lastError }, 'restarting unit container');
    try {
      await startContainer(this.options.docker, container.id);
    } catch (error) {
      return this.fail(assignment, memory, `container failed to start: ${dockerErrorMessage(error)}`, container.id);
    }
    await this.report(assignment, memory, { active: 'activating', sub: 'start-pre', containerId: container.id });
    this.options.wakeIn(0);
  }

  /** While a failed unit waits out its backoff it reports failed/auto-restart with the failure. */
  private async waitingForRetry(assignment: Assignment, memory: UnitMemory, containerId?: string): Promise<boolean> {
    const waitMs = memory.backoff.waitMs(Date.now());
    if (waitMs === 0) return false;
    this.options.wakeIn(waitMs);
    await this.report(assignment, memory, {
      active: 'failed',
      sub: 'auto-restart',
      ...(containerId ? { containerId } : {}),
      ...(memory.backoff.lastError ? { error: memory.backoff.lastError } : {}),
    });
    return true;
  }

  private async fail(assignment: Assignment, memory: UnitMemory, error: string, containerId?: string): Promise<void> {
    this.options.log.warn({ unit: assignment.unit, release: assignment.release, reason: error }, 'unit failed');
    memory.backoff.recordFailure(error, Date.now());
    await this.waitingForRetry(assignment, memory, containerId);
  }

  private report(assignment: Assignment, memory: UnitMemory, state: Pick<ObservedStatus, 'active' | 'sub' | 'address' | 'containerId' | 'error'>): Promise<void> {
    return this.options.reporter.report(observedStatus(assignment, this.options.machineId, memory.restarts, state));
  }
}

export function observedStatus(
  assignment: Assignment,
  machineId: string,
  restarts: number,
  state: Pick<ObservedStatus, 'active' | 'sub' | 'address' | 'containerId' | 'error'>,
): ObservedStatus {
  return {
    unit: assignment.unit,
    service: assignment.service,
    instance: assignment.instance,
    machine: machineId,
    release: assignment.release,
    image: assignment.image,
    active: state.active,
    sub: state.sub,
    ...(state.address ? { address: state.address } : {}),
    ...(state.containerId ? { containerId: state.containerId } : {}),
    restarts,
    ...(state.error ? { error: state.error } : {}),
  };
}
