import type { Machine, MachineAway } from '../../schemas/cluster.js';
import { clearAway, markAway, registerMachine } from '../../store/records/machines.js';
import type { Store } from '../../store/store.js';
import type { LeasedWriter } from './leased-writer.js';

// The machine record the scheduler places units by. Written under the agent's lease, and
// rewritten only when what it says changes (engine reachability, unit count, capacity).
// Beside it, the machine's away record: written (not leased) when the agent stops on purpose, so
// the scheduler keeps the machine's units in place for its machine grace while the machine
// restarts or reboots, and deleted once the machine is registered again (docs/cluster.md).

export type MachineIdentity = Pick<Machine, 'id' | 'address' | 'host' | 'labels' | 'network' | 'capacity' | 'platformPorts'>;

export interface ResourceSettings {
  reserveMemoryMB: number;
  reserveCpus: number;
  capacityMemoryMB?: number;
  capacityCpus?: number;
}

/** What `docker info` says of the machine: CPUs and memory in bytes. */
export interface EngineResources {
  NCPU: number;
  MemTotal: number;
  /** The engine's data root, whose paths unit statuses do not show. */
  DockerRootDir?: string;
}

/**
 * Memory (MB) and CPUs units may reserve: the operator's cap where set, else the engine's figure
 * less the reserve (never below 0). A figure the engine has not told yet is left out, and the
 * planner does not count it.
 */
export function unitCapacity(engine: EngineResources | undefined, settings: ResourceSettings): Pick<Machine['capacity'], 'memoryMB' | 'cpus'> {
  const memoryMB = settings.capacityMemoryMB ?? (engine ? Math.max(0, Math.floor(engine.MemTotal / (1024 * 1024)) - settings.reserveMemoryMB) : undefined);
  const cpus = settings.capacityCpus ?? (engine ? Math.max(0, Math.round((engine.NCPU - settings.reserveCpus) * 1000) / 1000) : undefined);
  return { ...(memoryMB === undefined ? {} : { memoryMB }), ...(cpus === undefined ? {} : { cpus }) };
}

export class MachineRegistration {
  private written: string | undefined;
  private unreachableSince: string | undefined;
  private readonly startedAt = new Date().toISOString();
  /** Whether this process has registered and deleted any away record a stop before it left. */
  private back = false;

  constructor(
    private readonly keys: LeasedWriter,
    private readonly store: Pick<Store, 'put' | 'delete'>,
    private readonly identity: MachineIdentity,
  ) {}

  async update(engine: Machine['docker'], unitCount: number, resources: Pick<Machine['capacity'], 'memoryMB' | 'cpus'> = {}): Promise<void> {
    const docker = this.withOutageStart(engine);
    const capacity = { ...this.identity.capacity, ...resources };
    const observed = { ...this.identity, capacity, docker, unitCount, startedAt: this.startedAt };
    const serialized = JSON.stringify(observed);
    if (serialized !== this.written) {
      const machine: Machine = { ...observed, updatedAt: new Date().toISOString() };
      await registerMachine(this.keys, machine);
      this.written = serialized;
    }
    // After the registration, never before: in between the scheduler would see neither and count the machine lost.
    if (this.back) return;
    await clearAway(this.store, this.identity.id);
    this.back = true;
  }

  /** Says the machine is away and expected back: the agent stops on purpose (a restart, a reboot). */
  async away(reason: string): Promise<void> {
    const record: MachineAway = { machine: this.identity.id, since: new Date().toISOString(), reason };
    await markAway(this.store, record);
  }

  /**
   * The scheduler moves a machine's units once its engine has been gone for longer than a grace
   * period (docs/cluster.md), so the record says since when; the first failed check sets it.
   */
  private withOutageStart(engine: Machine['docker']): Machine['docker'] {
    if (engine.reachable) {
      this.unreachableSince = undefined;
      return engine;
    }
    this.unreachableSince ??= new Date().toISOString();
    return { ...engine, unreachableSince: this.unreachableSince };
  }
}
