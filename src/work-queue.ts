// The one way loops that react to changes run their passes, after Kubernetes' workqueue
// (client-go util/workqueue): work is asked for by key, and a key is
// - de-duplicated: asked for any number of times while it waits, it runs once;
// - never run twice at once: asked for while its pass runs, it runs exactly once more after that
//   pass (client-go's dirty and processing sets), so a change that arrives mid-pass is seen by a
//   pass that starts after it, and none is dropped;
// - rate-limited: a pass that fails runs again after a wait that doubles per failure of that key
//   up to a cap, and a pass that succeeds resets the wait (ItemExponentialFailureRateLimiter,
//   Forget). Asking for the key meanwhile runs it at once: new work never waits out a backoff.
// Different keys run side by side. Passes are level-triggered: a pass recomputes from the whole
// state, so running one more than needed costs a little work and loses nothing.
// Keys asked for in one turn of the event loop start in the next: a burst is one pass.

import { doublingDelayMs } from './doubling-delay.js';

export interface WorkQueueOptions {
  /** One pass of `key`. One that throws (or rejects) has failed. */
  run: (key: string) => Promise<void>;
  /** Told of every failed pass; the queue carries on. */
  onError: (error: unknown, key: string) => void;
  /** When set, a failed pass of a key runs again after `firstMs`, doubling per failure up to `maxMs`. */
  retry?: RetryBackoff;
}

export interface RetryBackoff {
  firstMs: number;
  maxMs: number;
}

const MAX_TIMER_MS = 2 ** 31 - 1;

interface Delayed {
  at: number;
  timer: NodeJS.Timeout;
}

export class WorkQueue {
  /** Keys asked for and not yet started (the dirty set), each with who waits for its next pass. */
  private readonly queued = new Map<string, (() => void)[]>();
  /** Keys whose pass runs now (the processing set). */
  private readonly running = new Map<string, Promise<void>>();
  /** Keys asked for later (`addAfter`, retries): only the earliest time per key is kept. */
  private readonly delayed = new Map<string, Delayed>();
  /** Failed passes in a row, per key. */
  private readonly failures = new Map<string, number>();
  private startScheduled = false;
  private closed = false;

  constructor(private readonly options: WorkQueueOptions) {}

  /**
   * Asks for a pass of `key`. Resolves once a pass of it that started after this call has ended,
   * whether it succeeded or failed (`onError` hears of a failure), or when the queue closes first.
   * A pass must not await `add` of its own key: that pass can only start after it ends.
   */
  add(key: string): Promise<void> {
    if (this.closed) return Promise.resolve();
    const done = new Promise<void>((resolve) => {
      const waiting = this.queued.get(key);
      if (waiting) waiting.push(resolve);
      else this.queued.set(key, [resolve]);
    });
    this.scheduleStart();
    return done;
  }

  /**
   * Asks for a pass of `key` in `ms`. Of several such asks for one key the earliest is kept (the
   * pass it brings asks again for what it still needs); a pass that runs sooner does not cancel it.
   */
  addAfter(key: string, ms: number): void {
    if (this.closed) return;
    // setTimeout takes at most 2^31-1 ms (about 24.8 days): longer waits are asked again when it fires.
    const at = Date.now() + Math.min(Math.max(0, ms), MAX_TIMER_MS);
    const pending = this.delayed.get(key);
    if (pending && pending.at <= at) return;
    clearTimeout(pending?.timer);
    const timer = setTimeout(() => {
      this.delayed.delete(key);
      void this.add(key);
    }, at - Date.now());
    this.delayed.set(key, { at, timer });
  }

  /** Forgets the failures of `key`: its next failure waits `firstMs` again. A pass that succeeds does this itself. */
  forget(key: string): void {
    this.failures.delete(key);
  }

  /** Failed passes of `key` in a row. */
  failuresOf(key: string): number {
    return this.failures.get(key) ?? 0;
  }

  /** A pass of `key` is asked for or running. */
  busy(key: string): boolean {
    return this.queued.has(key) || this.running.has(key);
  }

  /** Resolves once no pass is asked for or running (delayed ones aside). */
  async idle(): Promise<void> {
    while (this.queued.size > 0 || this.running.size > 0) {
      await Promise.all(this.running.values());
      if (this.queued.size > 0) await new Promise((resolve) => setImmediate(resolve));
    }
  }

  /** Starts no more passes: waiters of passes not yet started resolve, delayed ones are dropped, and the passes running are waited for. */
  async close(): Promise<void> {
    this.closed = true;
    for (const { timer } of this.delayed.values()) clearTimeout(timer);
    this.delayed.clear();
    for (const waiting of this.queued.values()) for (const resolve of waiting) resolve();
    this.queued.clear();
    await Promise.all(this.running.values());
  }

  private scheduleStart(): void {
    if (this.startScheduled) return;
    this.startScheduled = true;
    setImmediate(() => {
      this.startScheduled = false;
      this.startReady();
    });
  }

  /** Starts every queued key that is not running; a running one starts again when its pass ends. */
  private startReady(): void {
    if (this.closed) return;
    for (const [key, waiting] of this.queued) {
      if (this.running.has(key)) continue;
      this.queued.delete(key);
      const pass = this.pass(key).finally(() => {
        this.running.delete(key);
        for (const resolve of waiting) resolve();
        if (this.queued.has(key)) this.scheduleStart();
      });
      this.running.set(key, pass);
    }
  }

  private async pass(key: string): Promise<void> {
    try {
      await this.options.run(key);
      this.forget(key);
    } catch (error) {
      const failures = this.failuresOf(key) + 1;
      this.failures.set(key, failures);
      try {
        this.options.onError(error, key);
      } catch {
        // A listener that fails must not stop the queue.
      }
      const retry = this.options.retry;
      if (retry) this.addAfter(key, doublingDelayMs(failures, retry.firstMs, retry.maxMs));
    }
  }
}
