// Failed sign-ins are slowed: an address that failed to authenticate `limit` times within a window
// is refused (429) until that window ends, before any token it presents is looked up, so guessing
// secrets costs a minute per 20 guesses. The window opens at an address's first failure.
//
// Addresses are the client's as clientAddress (src/auth/caller.ts) sees it: the socket's, or, for
// a call a role of this machine passed on (the web role), the address that role saw. A proxy on
// another machine (a load balancer) shares one budget among all its callers. At most `maxAddresses` are
// tracked, the least recently failed dropped first, so no caller can grow this without bound.

export interface FailureLimiterOptions {
  /** Failures an address may have in one window; the next call is refused. */
  limit?: number;
  windowMs?: number;
  maxAddresses?: number;
  now?: () => number;
}

interface Window {
  since: number;
  failures: number;
}

export class FailureLimiter {
  private readonly windows = new Map<string, Window>();
  private readonly limit: number;
  private readonly windowMs: number;
  private readonly maxAddresses: number;
  private readonly now: () => number;
  /** When the last window that reached the limit ends: until then some address may be refused. */
  private limitingUntil = -Infinity;

  constructor(options: FailureLimiterOptions = {}) {
    this.limit = options.limit ?? 20;
    this.windowMs = options.windowMs ?? 60_000;
    this.maxAddresses = options.maxAddresses ?? 10_000;
    this.now = options.now ?? Date.now;
  }

  /** Milliseconds until the address may authenticate again; 0 when it may now. */
  retryAfterMs(address: string): number {
    const window = this.current(address);
    return window && window.failures >= this.limit ? window.since + this.windowMs - this.now() : 0;
  }

  /**
   * Whether any address may be refused now. Checked on every call before an address is worked out:
   * one failure somewhere (a mistyped token) must not make every call pay the lookup for a minute.
   */
  limitsAny(): boolean {
    if (this.limitingUntil === -Infinity) return false; // no clock read while no address reached the limit
    if (this.limitingUntil > this.now()) return true;
    this.limitingUntil = -Infinity;
    return false;
  }

  recordFailure(address: string): void {
    const window = this.current(address) ?? { since: this.now(), failures: 0 };
    window.failures += 1;
    if (window.failures >= this.limit) this.limitingUntil = Math.max(this.limitingUntil, window.since + this.windowMs);
    // Re-inserted, so the map's order is the order of last failure.
    this.windows.delete(address);
    this.windows.set(address, window);
    if (this.windows.size > this.maxAddresses) this.windows.delete(this.windows.keys().next().value!);
  }

  /** How many addresses are tracked. */
  get size(): number {
    return this.windows.size;
  }

  private current(address: string): Window | undefined {
    const window = this.windows.get(address);
    if (window && this.now() - window.since >= this.windowMs) {
      this.windows.delete(address);
      return undefined;
    }
    return window;
  }
}
