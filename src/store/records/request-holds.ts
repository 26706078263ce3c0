import { requestHoldKey, requestHoldRoot } from '../keys.js';
import { decode } from '../json-records.js';
import type { Store } from '../store.js';
import type { RequestHold } from '../../schemas/request-hold.js';

// The one owner of /platform/request-holds/<service>: a handover under way. The leading scheduler
// writes it (through its fenced store, so a deposed leader cannot hold a service) before it stops
// a single-writer service's old unit, and deletes it once the new unit (or the old one, brought
// back) runs; every gateway watches the prefix and holds the service's new requests meanwhile.
// The record carries its own end (`until`): a leader that dies mid-handover leaves a hold that
// gateways stop honouring on their own, and the leader's housekeeping deletes once it has ended.

/** Asks every gateway to hold `hold.service`'s new requests, replacing a hold the service had. */
export async function holdRequests(store: Store, hold: RequestHold): Promise<void> {
  await store.put(requestHoldKey(hold.service), JSON.stringify(hold));
}

/** Lets the gateways send the service's held requests on (nothing to do when none are held). */
export async function releaseRequests(store: Store, service: string): Promise<void> {
  await store.delete(requestHoldKey(service));
}

/** Deletes holds whose end has passed (a leader died mid-handover), each only if nobody wrote it since it was read; how many went. */
export async function deleteEndedRequestHolds(store: Store, now = Date.now()): Promise<number> {
  let deleted = 0;
  for (const kv of await store.list(requestHoldRoot)) {
    if (Date.parse(decode<RequestHold>(kv).until) > now) continue;
    const done = await store.txn([{ key: kv.key, target: 'modRevision', equals: kv.modRevision }], [{ op: 'delete', key: kv.key }]);
    if (done.succeeded) deleted += 1;
  }
  return deleted;
}
