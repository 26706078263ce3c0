import type { Operation, Store } from '../store/store.js';
import { notifyDeliveryKey, notifyDeliveryPrefix, notifyOutboxKey } from '../store/keys.js';
import { deleteKeys, listRecords, updateRecord } from '../store/json-records.js';
import type { DeliveryState, NotificationEvent, NotifyDelivery, NotifyEndpointRecord } from '../schemas/notification.js';
import { endpointWants } from './events.js';
import { nextAttemptAt, type RetryPolicy } from './retry-schedule.js';

// The one owner of the outbox and the deliveries made from it (the transactional outbox pattern):
//   event written to the outbox (with the deployment record it reports, in one transaction; or
//   create-if-absent by any scheduler that saw a unit fail or a machine go)
//   → the leader turns it into one pending delivery per endpoint that wants it, deleting it from
//     the outbox in the same transaction
//   → each delivery is tried until a 2xx (delivered) or until it is given up (failed).
// A delivery is written before it is sent and marked delivered only after the 2xx, so a leader
// that dies part-way leaves it pending for the next one: at least once, never lost; the event id
// lets the receiver drop a repeat.

/** The outbox write of an event, for a transaction that records what caused it. */
export const outboxWrite = (event: NotificationEvent): Operation => ({ op: 'put', key: notifyOutboxKey(event.id), value: JSON.stringify(event) });

/** Writes the event unless it is in the outbox already (another scheduler saw the same cause first). */
export const recordObservedEvent = (store: Store, event: NotificationEvent): Promise<boolean> => store.create(notifyOutboxKey(event.id), JSON.stringify(event));

/**
 * Turns an outbox entry into pending deliveries, one per endpoint that wants it and has none of it
 * yet (a cause seen again after the entry was taken makes the same id, hence the same keys), and
 * takes the entry out of the outbox. Returns false when the entry or a delivery changed meanwhile
 * (the caller looks again at the next change).
 */
export async function fanOut(store: Store, entry: { event: NotificationEvent; modRevision: number }, endpoints: readonly NotifyEndpointRecord[], hasDelivery: (key: string) => boolean, now: number): Promise<boolean> {
  const at = new Date(now).toISOString();
  const wanted = endpoints.filter((endpoint) => endpointWants(endpoint, entry.event)).map((endpoint) => ({ endpoint, key: notifyDeliveryKey(entry.event.id, endpoint.id) }));
  const fresh = wanted.filter(({ key }) => !hasDelivery(key));
  const key = notifyOutboxKey(entry.event.id);
  const result = await store.txn(
    [{ key, target: 'modRevision', equals: entry.modRevision }, ...fresh.map(({ key }) => ({ key, target: 'createRevision' as const, equals: 0 }))],
    [
      { op: 'delete', key },
      ...fresh.map(({ endpoint, key }): Operation => {
        const delivery: NotifyDelivery = { event: entry.event, endpoint: endpoint.id, url: endpoint.url, state: 'pending', attempts: 0, createdAt: at, updatedAt: at, nextAttemptAt: at };
        return { op: 'put', key, value: JSON.stringify(delivery) };
      }),
    ],
  );
  return result.succeeded;
}

/** What one attempt got: a status (any), or an error before one came. */
export interface AttemptResult {
  statusCode?: number;
  error?: string;
}

const succeeded = (result: AttemptResult): boolean => result.statusCode !== undefined && result.statusCode >= 200 && result.statusCode < 300;

/** The delivery after an attempt: delivered on a 2xx, else pending until its next try, or failed once given up. */
export function afterAttempt(delivery: NotifyDelivery, result: AttemptResult, policy: RetryPolicy, now: number): NotifyDelivery {
  const { nextAttemptAt: _next, statusCode: _status, error: _error, ...rest } = delivery;
  const attempts = delivery.attempts + 1;
  const base = { ...rest, attempts, updatedAt: new Date(now).toISOString(), ...(result.statusCode === undefined ? {} : { statusCode: result.statusCode }) };
  if (succeeded(result)) return { ...base, state: 'delivered' };
  const error = result.error ?? `HTTP ${String(result.statusCode)}`;
  const next = nextAttemptAt(policy, Date.parse(delivery.createdAt), attempts, now);
  if (next === undefined) return { ...base, state: 'failed', error: `given up after ${attempts} attempts: ${error}` };
  return { ...base, state: 'pending', error, nextAttemptAt: new Date(next).toISOString() };
}

/** The delivery and the revision of its write; undefined when it is gone. */
export type RecordedDelivery = { record: NotifyDelivery; revision: number } | undefined;

/** Records an attempt's result; a delivery no longer pending is left as it is. */
export const recordAttempt = (store: Store, key: string, result: AttemptResult, policy: RetryPolicy, now = Date.now()): Promise<RecordedDelivery> =>
  updateRecord<NotifyDelivery>(store, key, (current) => (current.state === 'pending' ? afterAttempt(current, result, policy, now) : current));

/** Gives a pending delivery up without trying (its endpoint was removed). */
export const giveUp = (store: Store, key: string, why: string, now = Date.now()): Promise<RecordedDelivery> =>
  updateRecord<NotifyDelivery>(store, key, (current) => {
    if (current.state !== 'pending') return current;
    const { nextAttemptAt: _next, ...rest } = current;
    return { ...rest, state: 'failed', error: why, updatedAt: new Date(now).toISOString() };
  });

/** Newest first. */
export async function listDeliveries(store: Store, options: { limit: number; state?: DeliveryState }): Promise<NotifyDelivery[]> {
  const all = await listRecords<NotifyDelivery>(store, notifyDeliveryPrefix);
  return all
    .filter((delivery) => !options.state || delivery.state === options.state)
    .sort((a, b) => (a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : 0))
    .slice(0, options.limit);
}

/** Finished deliveries are kept this long, and at most this many. */
export const deliveryRetention = { maxAgeMs: 7 * 86_400_000, maxFinished: 1000 };

/** Deletes finished deliveries older than a week or beyond the newest 1,000; pending ones stay. */
export async function pruneDeliveries(store: Store, now = Date.now()): Promise<number> {
  const finished = (await store.list(notifyDeliveryPrefix))
    .map((kv) => ({ key: kv.key, delivery: JSON.parse(kv.value) as NotifyDelivery }))
    .filter(({ delivery }) => delivery.state !== 'pending')
    .sort((a, b) => (a.delivery.updatedAt < b.delivery.updatedAt ? 1 : -1));
  const old = finished.filter(({ delivery }, index) => index >= deliveryRetention.maxFinished || now - Date.parse(delivery.updatedAt) > deliveryRetention.maxAgeMs);
  await deleteKeys(store, old.map(({ key }) => key));
  return old.length;
}
