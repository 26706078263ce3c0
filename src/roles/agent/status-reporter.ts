import { trace } from '../../trace.js';
import type { UnitStatus } from '../../schemas/cluster.js';
import { UnitStatusRecords } from '../../store/records/unit-statuses.js';
import { isRunning, slotOf } from '../../units.js';
import type { LeasedWriter } from './leased-writer.js';
import { withoutHostPaths } from './host-paths.js';

// Unit statuses as this agent observes them, one per slot (unit@spec), written under its lease.
// Reconcile recomputes every status on every pass; only changes reach the store, so a steady
// cluster writes nothing.

export type ObservedStatus = Omit<UnitStatus, 'updatedAt'>;

/** What a status says when a unit fails or waits: the kind for code, the message for people. */
export type UnitFailure = Required<Pick<UnitStatus, 'error' | 'errorKind'>>;

/**
 * A slot's failure episode: it starts at the first failed status and lasts through the restarts
 * after it (failed, activating, failed…) until the unit runs. Statuses lost with the agent's memory
 * (a restarted agent) start a new one.
 */
export function failingSinceAfter(previous: UnitStatus | undefined, observed: ObservedStatus, now: string): string | undefined {
  if (isRunning(observed)) return undefined;
  if (previous?.failingSince !== undefined) return previous.failingSince;
  return observed.active === 'failed' ? now : undefined;
}

export class UnitStatusReporter {
  private readonly current = new Map<string, { observed: string; status: UnitStatus }>();
  /** Directories of this machine whose paths a status never shows (the engine's data root). */
  private readonly hostDirs: string[] = [];
  private readonly records: UnitStatusRecords;

  constructor(keys: LeasedWriter, machineId: string) {
    this.records = new UnitStatusRecords(keys, machineId);
  }

  /**
   * Writes the slot's status unless it is what was reported last. A slot's reports reach the
   * store in the order they were made without waiting for each other: the leased keys hold the
   * newest value of each key and write it in their next transaction, so a status reported while
   * the slot's previous one is still on its way (a unit passing its probe a millisecond after its
   * start was reported) goes in the very next transaction, or replaces the previous one if that
   * has not gone out yet. Resolves after the write's attempt (failed ones are retried by the keys).
   */
  async report(reported: ObservedStatus): Promise<void> {
    const observed = reported.error === undefined ? reported : { ...reported, error: withoutHostPaths(reported.error, this.hostDirs) };
    const slot = slotOf(observed);
    const serialized = JSON.stringify(observed);
    const previous = this.current.get(slot);
    if (previous?.observed === serialized) return;
    const now = new Date().toISOString();
    const failingSince = failingSinceAfter(previous?.status, observed, now);
    const status: UnitStatus = { ...observed, ...(failingSince === undefined ? {} : { failingSince }), updatedAt: now };
    this.current.set(slot, { observed: serialized, status });
    trace('agent.status', `${observed.unit} ${observed.active}/${observed.sub}`);
    await this.records.write(slot, status);
    trace('agent.status-written', `${observed.unit} ${observed.active}/${observed.sub}`);
  }

  /** A directory of this machine (the engine's data root) whose paths statuses replace from now on. */
  hideHostDir(dir: string): void {
    if (!this.hostDirs.includes(dir)) this.hostDirs.push(dir);
  }

  /** The last status reported for a slot. */
  get(slot: string): UnitStatus | undefined {
    return this.current.get(slot)?.status;
  }

  async forget(slot: string): Promise<void> {
    if (!this.current.delete(slot)) return;
    await this.records.remove(slot);
  }

  /**
   * After the machine's lease was lost (a partition longer than its TTL), every status went with
   * it, and what they said may no longer hold: the scheduler has likely moved those units. Writing
   * them again under the new lease would announce units as running that are about to be stopped,
   * and the gateway would route to both copies. They are forgotten instead; the next pass, which
   * reads the assignments afresh, reports what is still wanted.
   */
  forgetAll(): void {
    for (const slot of this.current.keys()) this.records.forget(slot);
    this.current.clear();
  }

  /** Slots with a reported status. */
  slots(): string[] {
    return [...this.current.keys()];
  }

  statuses(): UnitStatus[] {
    return [...this.current.values()].map((entry) => entry.status).sort((a, b) => a.unit.localeCompare(b.unit));
  }
}
