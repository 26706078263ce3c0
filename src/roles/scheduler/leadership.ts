import type { FastifyBaseLogger } from 'fastify';
import type { Compare, Lease, Store, Watch } from '../../store/store.js';
import { schedulerLeaderKey } from '../../store/keys.js';
import { announcementEntry } from '../../store/records/announcements.js';
import { WorkQueue } from '../../work-queue.js';

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
const CAMPAIGN = 'campaign';

function leaderIdOf(value: string): unknown {
  try {
    return (JSON.parse(value) as { id?: unknown }).id;
  } catch {
    return undefined;
  }
}

export class Leadership {
  private lease: Lease | undefined;
  private revision = 0;
  private watch: Watch | undefined;
  private closed = false;
  /**
   * Campaigns, one at a time: a deletion of the leader key seen while one runs brings one more
   * after it (dropping it left no scheduler campaigning), and a failed one is tried again.
   */
  private readonly campaigns = new WorkQueue({
    run: () => this.campaign(),
    onError: (error) => this.options.log.warn({ err: error }, 'leader election failed; retrying'),
    retry: { firstMs: RETRY_MS, maxMs: RETRY_MS },
  });

  constructor(
    private readonly store: Store,
    private readonly options: { id: string; address: string; announce: boolean; ttlSeconds: number; log: FastifyBaseLogger; events: LeadershipEvents },
  ) {}

  async start(): Promise<void> {
    this.watch = await this.store.watchPrefix(schedulerLeaderKey, (event) => {
      if (event.type === 'delete') void this.campaigns.add(CAMPAIGN);
    });
    await this.campaigns.add(CAMPAIGN);
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
    await this.campaigns.close();
    await this.watch?.close();
    const lease = this.lease;
    this.lease = undefined;
    this.revision = 0;
    await lease?.revoke().catch(() => undefined);
  }

  /** One campaign: creates the leader key unless another scheduler holds it (its deletion brings the next). */
  private async campaign(): Promise<void> {
    if (this.closed || this.isLeader()) return;
    this.lease ??= await this.grant();
    const lease = this.lease;
    const value = JSON.stringify({ id: this.options.id, address: this.options.address, since: new Date().toISOString() });
    const result = await this.store.txn(
      [{ key: schedulerLeaderKey, target: 'createRevision', equals: 0 }],
      [
        { op: 'put', key: schedulerLeaderKey, value, lease: lease.id },
        ...(this.options.announce ? [{ op: 'put' as const, ...announcementEntry('scheduler', this.options.address), lease: lease.id }] : []),
      ],
    );
    const revision = result.succeeded ? result.revision : await this.ownKeyRevision(lease);
    if (revision === undefined || this.closed || this.lease !== lease) return;
    this.revision = revision;
    this.options.log.info({ scheduler: this.options.id, revision, recovered: !result.succeeded }, 'elected scheduler leader');
    this.options.events.elected();
  }

  /**
   * The leader key's create revision when the key is this scheduler's, under its current lease.
   * A refused create may have been refused by our own earlier write: one that committed but whose
   * answer was lost (DEADLINE_EXCEEDED on a slow machine) and failed the campaign before. That key
   * is ours while our lease lives, so nobody else can lead; only reading it tells.
   */
  private async ownKeyRevision(lease: Lease): Promise<number | undefined> {
    const key = await this.store.get(schedulerLeaderKey);
    if (key?.lease !== lease.id) return undefined;
    return leaderIdOf(key.value) === this.options.id ? key.createRevision : undefined;
  }

  private async grant(): Promise<Lease> {
    const lease = await this.store.grantLease(this.options.ttlSeconds);
    lease.onLost((reason) => {
      if (this.lease !== lease) return;
      this.lease = undefined;
      this.depose(`lease lost: ${reason.message}`);
      this.campaigns.addAfter(CAMPAIGN, RETRY_MS);
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
