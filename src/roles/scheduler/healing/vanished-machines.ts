// When healing must look for jobs of lost machines. Listing every job and run record on each heal
// pass (every 10 s and on every trigger) costs a read of all of them, about 10,000 records at 50
// kept jobs × 200 services, to find what is almost always nothing. A job can only be left without
// its agent when a machine that was present is gone, so a listing is needed only then: the first
// pass of a leadership (what happened before it is not known), a pass where a machine seen since the
// last complete look is missing, and the passes after a look that left jobs of a machine still in
// its renewal grace (to end them once it is lost). A machine that registered and was lost between
// two passes (a job placed on it in between) is told by the cluster watch's events (saw); and a
// look comes at least every few minutes all the same. Pure: the healer tells it what it saw and when.

/** The longest time between two looks. */
export const LOOK_AT_LEAST_EVERY_MS = 5 * 60_000;

export class VanishedMachines {
  /** Machines seen present since the last complete look; undefined: no complete look yet. */
  private seen: Set<string> | undefined;
  private lookedAt = 0;

  /** Whether this pass must list the jobs, given the machines present (registered or away). */
  mustLook(present: ReadonlySet<string>, now: number): boolean {
    if (!this.seen || now - this.lookedAt >= LOOK_AT_LEAST_EVERY_MS) return true;
    let vanished = false;
    for (const machine of this.seen) if (!present.has(machine)) vanished = true;
    for (const machine of present) this.seen.add(machine);
    return vanished;
  }

  /** A machine registered between passes (the cluster watch's event): its loss is looked for too. */
  saw(machine: string): void {
    this.seen?.add(machine);
  }

  /**
   * A look is done: with nothing left to end (`settled`), only the machines present now are known;
   * else (a job's machine still renewing) the next passes look again.
   */
  looked(present: ReadonlySet<string>, settled: boolean, now: number): void {
    this.seen = settled ? new Set(present) : undefined;
    this.lookedAt = now;
  }

  /** A new leadership: the next pass lists. (A failed look needs nothing: the machine it looked for is still missing from `seen`'s view.) */
  forget(): void {
    this.seen = undefined;
  }
}
