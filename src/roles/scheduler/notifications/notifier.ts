import type { FastifyBaseLogger } from 'fastify';
import type { Store } from '../../../store/store.js';
import { notifyDeliveryPrefix, notifyEndpointPrefix, notifyOutboxPrefix } from '../../../store/keys.js';
import { PrefixCache, decodeCached } from '../../../store/prefix-cache.js';
import { FencedWriteError } from '../../../store/fenced-store.js';
import type { NotificationEvent, NotifyDelivery, NotifyEndpointRecord } from '../../../schemas/notification.js';
import { fanOut, giveUp, pruneDeliveries, recordAttempt, recordObservedEvent, type RecordedDelivery } from '../../../notifications/outbox.js';
import { endpointOrigin } from '../../../notifications/endpoints.js';
import type { RetryPolicy } from '../../../notifications/retry-schedule.js';
import { NotificationSender } from './notification-sender.js';
import { FailureObserver } from './failure-observer.js';
import { NotLeaderError } from '../leadership.js';
import type { ClusterWatch } from '../cluster-snapshot.js';
import { WorkQueue } from '../../../work-queue.js';

// Outbound notifications on the scheduler (docs/notifications.md). Every scheduler records the
// unit failures and lost machines it sees (failure-observer.ts) in the outbox; only the leader
// turns outbox entries into deliveries and sends them (src/notifications/outbox.ts holds the
// records' life). It reads the outbox, the deliveries and the endpoints from watched copies and
// acts on their changes, and on a timer only for the next retry that is due.

export interface NotifierOptions {
  /** Unfenced: any scheduler records the events it observes. */
  store: Store;
  /** Fenced on the leadership: only the leader writes deliveries. */
  leaderStore: Store;
  cluster: ClusterWatch;
  isLeader: () => boolean;
  log: FastifyBaseLogger;
  policy: RetryPolicy;
  /** How long one attempt may take, connecting included. */
  timeoutMs: number;
  /** --allowed-notification-destination: endpoints on special addresses deliveries may reach. */
  allowedDestinations?: readonly string[];
}

/** Attempts under way at once, over all endpoints. */
const MAX_IN_FLIGHT = 16;

interface Caches {
  outbox: PrefixCache;
  deliveries: PrefixCache;
  endpoints: PrefixCache;
}

export class Notifier {
  /** Delivery keys being attempted (or given up) here, until the watch shows the result. */
  private readonly busy = new Set<string>();
  private readonly sender: NotificationSender;
  /**
   * Passes over the outbox and the deliveries, one at a time: a change during a pass causes one
   * more; a pass that fails is tried again after a second, doubling up to 10 s.
   */
  private readonly passes = new WorkQueue({
    run: () => this.pass(),
    onError: (error) => {
      if (!lostLeadership(error)) this.options.log.warn({ err: error }, 'notifications: a pass failed; trying again shortly');
    },
    retry: { firstMs: 1000, maxMs: 10_000 },
  });
  private closed = false;

  private constructor(
    private readonly options: NotifierOptions,
    private readonly caches: Caches,
  ) {
    this.sender = new NotificationSender(options.timeoutMs, options.allowedDestinations);
    for (const cache of Object.values(caches)) cache.onChange(() => this.kick());
    new FailureObserver(options.cluster, (event) => void this.observed(event));
  }

  static async start(options: NotifierOptions): Promise<Notifier> {
    const [outbox, deliveries, endpoints] = await Promise.all([notifyOutboxPrefix, notifyDeliveryPrefix, notifyEndpointPrefix].map((prefix) => PrefixCache.start(options.store, prefix)));
    return new Notifier(options, { outbox: outbox!, deliveries: deliveries!, endpoints: endpoints! });
  }

  /** Looks at the outbox and the deliveries now (when leading): on election, on every change, when a retry is due. */
  kick(): void {
    if (this.closed || !this.options.isLeader()) return;
    void this.passes.add(PASS);
  }

  /** Deletes finished deliveries beyond the retention (leader only). */
  async prune(): Promise<void> {
    await pruneDeliveries(this.options.leaderStore);
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.passes.close();
    await Promise.all(Object.values(this.caches).map((cache) => cache.close()));
    await this.sender.close();
  }

  private async observed(event: NotificationEvent): Promise<void> {
    await recordObservedEvent(this.options.store, event).catch((error: unknown) =>
      this.options.log.warn({ err: error, event: event.event, id: event.id }, 'could not record a notification event'),
    );
  }

  /** Fans every outbox entry out, starts every attempt that is due, and asks for a pass when the next is. */
  private async pass(): Promise<void> {
    if (this.closed || !this.options.isLeader()) return;
    const now = Date.now();
    const endpoints = this.caches.endpoints.values().map((entry) => decodeCached<NotifyEndpointRecord>(entry));
    for (const entry of this.caches.outbox.values()) {
      const event = decodeCached<NotificationEvent>(entry);
      await fanOut(this.options.leaderStore, { event, modRevision: entry.modRevision }, endpoints, (key) => this.caches.deliveries.get(key) !== undefined, now);
    }
    const byId = new Map(endpoints.map((endpoint) => [endpoint.id, endpoint]));
    let next = Infinity;
    for (const entry of this.caches.deliveries.values()) {
      const delivery = decodeCached<NotifyDelivery>(entry);
      if (delivery.state !== 'pending' || this.busy.has(entry.key)) continue;
      const endpoint = byId.get(delivery.endpoint);
      if (!endpoint) {
        this.settle(entry.key, giveUp(this.options.leaderStore, entry.key, 'the endpoint was removed'));
        continue;
      }
      const due = Date.parse(delivery.nextAttemptAt ?? delivery.createdAt);
      if (due > now) next = Math.min(next, due);
      else if (this.busy.size < MAX_IN_FLIGHT) this.settle(entry.key, this.attempt(entry.key, delivery, endpoint));
    }
    if (next !== Infinity) this.passes.addAfter(PASS, next - Date.now());
  }

  private async attempt(key: string, delivery: NotifyDelivery, endpoint: NotifyEndpointRecord): Promise<RecordedDelivery> {
    const result = await this.sender.send(delivery, endpoint.secret);
    const recorded = await recordAttempt(this.options.leaderStore, key, result, this.options.policy);
    const where = { endpoint: endpoint.id, origin: endpointOrigin(endpoint.url), event: delivery.event.event, id: delivery.event.id, attempt: delivery.attempts + 1, status: result.statusCode };
    if (recorded?.record.state === 'failed') this.options.log.warn({ ...where, error: recorded.record.error }, 'notification given up');
    else if (result.error) this.options.log.info({ ...where, error: result.error, retryAt: recorded?.record.nextAttemptAt }, 'notification attempt failed');
    return recorded;
  }

  /**
   * Keeps the delivery out of passes until the watched copy shows what was written, so a pass in
   * between cannot take the old record for one still due and send it twice.
   */
  private settle(key: string, work: Promise<RecordedDelivery>): void {
    this.busy.add(key);
    void work
      .then(async (recorded) => {
        if (recorded) await this.caches.deliveries.caughtUp(recorded.revision);
      })
      .catch(async (error: unknown) => {
        if (lostLeadership(error)) return;
        this.options.log.warn({ err: error }, 'notifications: recording a delivery failed; looking again in a second');
        await new Promise((resolve) => setTimeout(resolve, 1000));
      })
      .finally(() => {
        this.busy.delete(key);
        this.kick();
      });
  }

}

/** The notifier's one key on its work queue: every pass looks at all the deliveries. */
const PASS = 'deliveries';

const lostLeadership = (error: unknown): boolean => error instanceof FencedWriteError || error instanceof NotLeaderError;
