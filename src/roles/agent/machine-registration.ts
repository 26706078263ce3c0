import type { Machine } from '../../schemas/cluster.js';
import { machineKey } from '../../store/keys.js';
import type { LeasedWriter } from './leased-writer.js';

// The machine record the scheduler places units by. Written under the agent's lease, and
// rewritten only when what it says changes (engine reachability, unit count).

export type MachineIdentity = Pick<Machine, 'id' | 'address' | 'host' | 'labels' | 'network' | 'capacity'>;

export class MachineRegistration {
  private written: string | undefined;
  private unreachableSince: string | undefined;
  private readonly startedAt = new Date().toISOString();

  constructor(
    private readonly keys: LeasedWriter,
    private readonly identity: MachineIdentity,
  ) {}

  async update(engine: Machine['docker'], unitCount: number): Promise<void> {
    const docker = this.withOutageStart(engine);
    const observed = { ...this.identity, docker, unitCount, startedAt: this.startedAt };
    const serialized = JSON.stringify(observed);
    if (serialized === this.written) return;
    const machine: Machine = { ...observed, updatedAt: new Date().toISOString() };
    await this.keys.set(machineKey(this.identity.id), JSON.stringify(machine));
    this.written = serialized;
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
