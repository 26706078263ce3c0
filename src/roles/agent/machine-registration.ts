import type { Machine } from '../../schemas/cluster.js';
import { machineKey } from '../../store/keys.js';
import type { LeasedWriter } from './leased-writer.js';

// The machine record the scheduler places units by. Written under the agent's lease, and
// rewritten only when what it says changes (engine reachability, unit count).

export type MachineIdentity = Pick<Machine, 'id' | 'address' | 'host' | 'labels' | 'network' | 'capacity'>;

export class MachineRegistration {
  private written: string | undefined;
  private readonly startedAt = new Date().toISOString();

  constructor(
    private readonly keys: LeasedWriter,
    private readonly identity: MachineIdentity,
  ) {}

  async update(docker: Machine['docker'], unitCount: number): Promise<void> {
    const observed = { ...this.identity, docker, unitCount, startedAt: this.startedAt };
    const serialized = JSON.stringify(observed);
    if (serialized === this.written) return;
    const machine: Machine = { ...observed, updatedAt: new Date().toISOString() };
    await this.keys.set(machineKey(this.identity.id), JSON.stringify(machine));
    this.written = serialized;
  }
}
