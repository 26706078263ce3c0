import type { FastifyBaseLogger } from 'fastify';
import type { Compare, Lease, Store, Watch } from '../../store/store.js';
import { schedulerLeaderKey } from '../../store/keys.js';
import { announcementEntry } from '../../store/records/announcements.js';

// One scheduler leads at a time: it holds the leader key, created under its own lease, and
// announces itself as /platform/services/scheduler under the same lease (unless a `platform
// announce` sidekick does that: --no-announce; the sidekick then announces only a leader). A lock alone does not
// guarantee mutual exclusion (a paused leader may wake up after its lease expired), so every
// write the leader makes is fenced: the transaction also checks that the leader key still has
// the create revision it had when this scheduler won, and fails otherwise.

export class NotLeaderError extends Error {
  constructor() {
    super('this scheduler is not the leader any more');
    this.name = 'NotLeaderError';
  }
}

export interface LeadershipEvents {
  elected(): void;
  deposed(): void;
}

const RETRY_MS = 500;

export class Leadership {
  private lease: Lease | undefined;
  private revision = 0;
  private watch: Watch | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private campaigning = false;
  private closed = false;

  constructor(
    private readonly store: Store,
    private readonly options: { id: string; address: string; announce: boolean; ttlSeconds: number; log: FastifyBaseLogger; events: LeadershipEvents },
  ) {}

  async start(): Promise<void> {
    this.watch = await this.store.watchPrefix(schedulerLeaderKey, (event) => {
      if (event.type === 'delete') void this.campaign();
    });
    await this.campaign();
  }

  isLeader(): boolean {
    return this.revision > 0;
  }

  /** The compare every leader write carries; throws when this scheduler does not lead. */
  fence(): Compare[] {
    if (!this.isLeader()) throw new NotLeaderError();
    return [{ key: schedulerLeaderKey, target: 'createRevision', equals: this.revision }];
  }

  /** After a failed fenced write: true when it failed because leadership moved (and we now know it). */
  async lostLeadership(): Promise<boolean> {
    if (!this.isLeader()) return true;
    const current = await this.store.get(schedulerLeaderKey);
    if (current?.createRevision === this.revision) return false;
    this.depose('the leader key changed');
    return true;
  }

  /** Gives leadership up at once (revoking the lease deletes the key), so a follower takes over. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retryTimer);
    await this.watch?.close();
    const lease = this.lease;
    this.lease = undefined;
    this.revision = 0;
    await lease?.revoke().catch(() => undefined);
  }

  private async campaign(): Promise<void> {
    if (this.closed || this.campaigning || this.isLeader()) return;
    this.campaigning = true;
    try {
      this.lease ??= await this.grant();
      const value = JSON.stringify({ id: this.options.id, address: this.options.address, since: new Date().toISOString() });
      const result = await this.store.txn(
        [{ key: schedulerLeaderKey, target: 'createRevision', equals: 0 }],
        [
          { op: 'put', key: schedulerLeaderKey, value, lease: this.lease.id },
          ...(this.options.announce ? [{ op: 'put' as const, ...announcementEntry('scheduler', this.options.address), lease: this.lease.id }] : []),
        ],
      );
      if (result.succeeded) {
        this.revision = result.revision;
        this.options.log.info({ scheduler: this.options.id, revision: result.revision }, 'elected scheduler leader');
        this.options.events.elected();
      }
    } catch (error) {
      this.options.log.warn({ err: error }, 'leader election failed; retrying');
      this.retryTimer = setTimeout(() => void this.campaign(), RETRY_MS);
    } finally {
      this.campaigning = false;
    }
  }

  private async grant(): Promise<Lease> {
    const lease = await this.store.grantLease(this.options.ttlSeconds);
    lease.onLost((reason) => {
      if (this.lease !== lease) return;
      this.lease = undefined;
      this.depose(`lease lost: ${reason.message}`);
      this.retryTimer = setTimeout(() => void this.campaign(), RETRY_MS);
    });
    return lease;
  }

  private depose(reason: string): void {
    if (!this.isLeader()) return;
    this.revision = 0;
    this.options.log.warn({ scheduler: this.options.id, reason }, 'no longer the scheduler leader');
    this.options.events.deposed();
  }
}
