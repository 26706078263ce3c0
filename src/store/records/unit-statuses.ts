import { unitStatusKey } from '../keys.js';
import type { UnitStatus } from '../../schemas/cluster.js';
import { slotOf } from '../../units.js';

// The one owner of /platform/unit-status/<machine>/<unit>@<spec>: what an agent observes of its
// unit slots, written by that machine's agent only (src/roles/agent/status-reporter.ts), under its
// lease; the scheduler, the gateway and the orchestrator watch the prefix.

/** What leased writes need: the agent's LeasedKeys. */
interface LeasedStatusWriter {
  set(key: string, value: string): Promise<unknown>;
  remove(key: string): Promise<unknown>;
  forget(key: string): void;
}

/** The key a slot's status is stored at, which also names it in watch events. */
export const unitStatusKeyOf = (status: Pick<UnitStatus, 'machine' | 'unit' | 'spec'>): string => unitStatusKey(status.machine, slotOf(status));

/** One machine's unit statuses, written through its leased keys. */
export class UnitStatusRecords {
  constructor(
    private readonly keys: LeasedStatusWriter,
    private readonly machineId: string,
  ) {}

  write(slot: string, status: UnitStatus): Promise<unknown> {
    return this.keys.set(unitStatusKey(this.machineId, slot), JSON.stringify(status));
  }

  remove(slot: string): Promise<unknown> {
    return this.keys.remove(unitStatusKey(this.machineId, slot));
  }

  /** Stops writing the slot's status again after a lost lease, without touching the store. */
  forget(slot: string): void {
    this.keys.forget(unitStatusKey(this.machineId, slot));
  }
}
