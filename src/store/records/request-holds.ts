import { requestHoldKey } from '../keys.js';
import type { Store } from '../store.js';
import type { RequestHold } from '../../schemas/request-hold.js';

// The one owner of /platform/request-holds/<service>: a handover under way. The leading scheduler
// writes it (through its fenced store, so a deposed leader cannot hold a service) before it stops
// a single-writer service's old unit, and deletes it once the new unit (or the old one, brought
// back) runs; every gateway watches the prefix and holds the service's new requests meanwhile.
// The record carries its own end (`until`): a leader that dies mid-handover leaves a hold that
// gateways stop honouring on their own.

/** Asks every gateway to hold `hold.service`'s new requests, replacing a hold the service had. */
export async function holdRequests(store: Store, hold: RequestHold): Promise<void> {
  await store.put(requestHoldKey(hold.service), JSON.stringify(hold));
}

/** Lets the gateways send the service's held requests on (nothing to do when none are held). */
export async function releaseRequests(store: Store, service: string): Promise<void> {
  await store.delete(requestHoldKey(service));
}
