import type { UnitStatus } from '../../schemas/cluster.js';
import { unitStatusKey } from '../../store/keys.js';
import type { LeasedWriter } from './leased-writer.js';

// Unit statuses as this agent observes them, written under its lease. Reconcile recomputes every
// status on every pass; only changes reach the store, so a steady cluster writes nothing.

export type ObservedStatus = Omit<UnitStatus, 'updatedAt'>;

export class UnitStatusReporter {
  private readonly current = new Map<string, { observed: string; status: UnitStatus }>();

  constructor(
    private readonly keys: LeasedWriter,
    private readonly machineId: string,
  ) {}

  async report(observed: ObservedStatus): Promise<void> {
    const serialized = JSON.stringify(observed);
    if (this.current.get(observed.unit)?.observed === serialized) return;
    const status: UnitStatus = { ...observed, updatedAt: new Date().toISOString() };
    await this.keys.set(unitStatusKey(this.machineId, observed.unit), JSON.stringify(status));
    this.current.set(observed.unit, { observed: serialized, status });
  }

  async forget(unit: string): Promise<void> {
    if (!this.current.has(unit)) return;
    await this.keys.remove(unitStatusKey(this.machineId, unit));
    this.current.delete(unit);
  }

  units(): string[] {
    return [...this.current.keys()];
  }

  statuses(): UnitStatus[] {
    return [...this.current.values()].map((entry) => entry.status).sort((a, b) => a.unit.localeCompare(b.unit));
  }
}
