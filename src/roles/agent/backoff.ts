// Crash-looping units are restarted with exponential backoff, as systemd's Restart= with
// RestartSteps or Kubernetes' CrashLoopBackOff do: quick recovery from a one-off crash without
// hammering the engine (or a dependency) when a unit fails at once every time.

import type { UnitFailure } from './status-reporter.js';

export interface BackoffPolicy {
  initialMs: number;
  maxMs: number;
  /** A unit that ran at least this long before failing starts again from `initialMs`. */
  resetAfterMs: number;
}

export const defaultBackoffPolicy: BackoffPolicy = { initialMs: 1_000, maxMs: 30_000, resetAfterMs: 30_000 };

export class RestartBackoff {
  private nextDelayMs: number;
  private retryAt: number | undefined;
  /** Why the unit last failed, kept while it waits so its status can keep saying so. */
  lastFailure: UnitFailure | undefined;

  constructor(private readonly policy: BackoffPolicy = defaultBackoffPolicy) {
    this.nextDelayMs = policy.initialMs;
  }

  /**
   * Records a failure and returns when to try again. Repeated reports of the same failure (every
   * reconcile sees the exited container until it is retried) keep the first retry time.
   */
  recordFailure(failure: UnitFailure, now: number, ranForMs = 0): number {
    if (this.retryAt !== undefined) return this.retryAt;
    if (ranForMs >= this.policy.resetAfterMs) this.nextDelayMs = this.policy.initialMs;
    this.retryAt = now + this.nextDelayMs;
    this.lastFailure = failure;
    this.nextDelayMs = Math.min(this.nextDelayMs * 2, this.policy.maxMs);
    return this.retryAt;
  }

  /** Milliseconds left before the next attempt is allowed; 0 when it may run now. */
  waitMs(now: number): number {
    return this.retryAt === undefined ? 0 : Math.max(0, this.retryAt - now);
  }

  /** The retry is being made: the next failure schedules a new one. */
  retrying(): void {
    this.retryAt = undefined;
  }
}
