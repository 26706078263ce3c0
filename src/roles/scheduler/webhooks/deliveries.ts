import { createHash, randomUUID } from 'node:crypto';
import type { Lease, Store } from '../../../store/store.js';
import { webhookDeliveryKey } from '../../../store/keys.js';
import { committedDespite } from '../../../store/unknown-outcome.js';
import type { HookKind } from './matching.js';

// At-least-once senders repeat deliveries (the registry retries until it sees a 2xx, GitHub's
// "Redeliver" reuses the delivery id). The first delivery of an event id creates its key; later
// ones find it and change nothing. Keys ride on a shared lease granted afresh every hour with a
// TTL of keep + 1 h, so each is remembered between `keepSeconds` and `keepSeconds` + 1 h, and the
// store needs one lease per hour rather than one per delivery.

export interface DeliveryLogOptions {
  /** How long a delivery id is remembered at least (default 6 h). */
  keepSeconds?: number;
  /** How often a fresh lease is granted (default 1 h). */
  rotateSeconds?: number;
}

interface HeldLease {
  lease: Lease;
  grantedAt: number;
}

const hashOf = (event: string): string => createHash('sha256').update(event).digest('hex');

export class DeliveryLog {
  private readonly keepSeconds: number;
  private readonly rotateSeconds: number;
  private current?: Promise<HeldLease>;

  constructor(
    private readonly store: Store,
    options: DeliveryLogOptions = {},
  ) {
    this.keepSeconds = options.keepSeconds ?? 6 * 3600;
    this.rotateSeconds = options.rotateSeconds ?? 3600;
  }

  /** True the first time `event` of `hook` is seen (and records it); false for a repeat. */
  async claim(hook: HookKind, event: string): Promise<boolean> {
    const { lease } = await this.lease();
    const key = webhookDeliveryKey(hook, hashOf(event));
    // The claim's own mark: a claim whose answer was lost knows its write from another scheduler's.
    const value = JSON.stringify({ hook, event, at: new Date().toISOString(), claim: randomUUID() });
    try {
      return await this.store.create(key, value, { lease: lease.id });
    } catch (error) {
      // The lease may be what failed (expired while the store was away): the next claim grants a new one.
      this.current = undefined;
      // A claim that committed, its answer lost, is this delivery's: a redelivery would be taken for a repeat.
      await committedDespite(error, this.store, key, value);
      return true;
    }
  }

  /** Forgets `event`, so that a redelivery is handled again (after its handling failed). */
  async forget(hook: HookKind, event: string): Promise<void> {
    await this.store.delete(webhookDeliveryKey(hook, hashOf(event)));
  }

  private async lease(): Promise<HeldLease> {
    const held = this.current;
    if (held) {
      const lease = await held.catch(() => undefined);
      if (lease && Date.now() - lease.grantedAt < this.rotateSeconds * 1000) return lease;
      // Another claim may have replaced it while this one waited.
      if (this.current !== held) return this.lease();
    }
    this.current = this.grant();
    return this.current;
  }

  private grant(): Promise<HeldLease> {
    const granted: Promise<HeldLease> = this.store.grantLease(this.keepSeconds + this.rotateSeconds, { autoKeepAlive: false }).then((lease) => {
      lease.onLost(() => this.drop(granted));
      return { lease, grantedAt: Date.now() };
    });
    granted.catch(() => this.drop(granted));
    return granted;
  }

  private drop(lease: Promise<HeldLease>): void {
    if (this.current === lease) this.current = undefined;
  }
}
