import type { FastifyRequest } from 'fastify';
import { HttpError } from '../http/errors.js';
import { callerToken } from './guard.js';
import type { StoreSpace } from '../store/store-space.js';

// One token must not be able to fill the store: 112 config patches of 480 KB once filled a 64 MiB
// etcd quota in 17 s, and every write of the cluster failed after. So what a token's calls make
// the store keep is counted against a budget per token (--write-budget bytes per
// --write-budget-window), refilled evenly over the window (a token bucket: a burst up to the whole
// budget, then the budget's pace). Calls without a token are the operator's (local calls under
// --auth auto, --auth none) and are not counted. Each process counts its own calls: a directory and
// a scheduler in two processes give a token a budget in each.

export interface WriteBudgetOptions {
  bytes: number;
  windowMs: number;
  now?: () => number;
}

export const DEFAULT_WRITE_BUDGET: WriteBudgetOptions = { bytes: 64 * 1024 ** 2, windowMs: 3_600_000 };

/** Every write costs at least this much, so a stream of tiny writes is bounded too (etcd keeps each revision with its key). */
const LEAST_WRITE_BYTES = 1024;
/** Tokens with a bucket at once; a bucket refilled to the brim is forgotten, so this bounds only a burst of many tokens. */
const MAX_TOKENS = 10_000;

/** What bounds the writes API callers ask for: the store's space and each token's budget. */
export interface WriteLimits {
  space: StoreSpace;
  budget: WriteBudget;
}

interface Bucket {
  bytes: number;
  at: number;
}

const kibibytes = (bytes: number): string => `${Math.ceil(bytes / 1024)} KiB`;

export class WriteBudget {
  private readonly buckets = new Map<string, Bucket>();
  private readonly now: () => number;

  constructor(private readonly options: WriteBudgetOptions = DEFAULT_WRITE_BUDGET) {
    this.now = options.now ?? Date.now;
  }

  /**
   * Takes `bytes` from the budget of the call's token, or refuses the call with 429 naming the
   * budget and when to try again, taking nothing. Calls without a token pass.
   */
  charge(request: FastifyRequest, bytes: number): void {
    const token = callerToken(request);
    if (!token) return;
    const cost = Math.max(bytes, LEAST_WRITE_BYTES);
    const bucket = this.refilled(token.name);
    if (cost > bucket.bytes) {
      const waitMs = ((cost - bucket.bytes) / this.options.bytes) * this.options.windowMs;
      const seconds = Math.max(1, Math.ceil(waitMs / 1000));
      throw new HttpError(
        429,
        `token ${token.name} is over its write budget of ${kibibytes(this.options.bytes)} per ${Math.round(this.options.windowMs / 1000)} s (--write-budget): ` +
          `this change writes ${kibibytes(cost)} and ${kibibytes(bucket.bytes)} is left; try again in ${seconds} s`,
        seconds,
      );
    }
    bucket.bytes -= cost;
    this.buckets.delete(token.name);
    if (this.buckets.size >= MAX_TOKENS) this.forgetFull();
    this.buckets.set(token.name, bucket);
  }

  private refilled(name: string): Bucket {
    const now = this.now();
    const bucket = this.buckets.get(name);
    if (!bucket) return { bytes: this.options.bytes, at: now };
    const refill = ((now - bucket.at) / this.options.windowMs) * this.options.bytes;
    return { bytes: Math.min(this.options.bytes, bucket.bytes + refill), at: now };
  }

  private forgetFull(): void {
    for (const name of this.buckets.keys()) if (this.refilled(name).bytes >= this.options.bytes) this.buckets.delete(name);
    // Still as many spenders: the one charged longest ago goes (a Map keeps insertion order, and charge re-inserts).
    const oldest = this.buckets.keys().next();
    if (this.buckets.size >= MAX_TOKENS && !oldest.done) this.buckets.delete(oldest.value);
  }
}
