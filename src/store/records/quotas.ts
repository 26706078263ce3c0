import type { Store } from '../store.js';
import { quotaKey, quotaPrefix } from '../keys.js';
import type { Quota, QuotaLimits } from '../../schemas/quota.js';

// Every write of a quota; the directory reads them through a watched cache of quotaPrefix.

/** Stores (or replaces) the quota of `services`; returns it. */
export async function saveQuota(store: Store, services: string, limits: QuotaLimits, now = Date.now()): Promise<Quota> {
  const quota: Quota = { services, ...limits, setAt: new Date(now).toISOString() };
  await store.put(quotaKey(services), JSON.stringify(quota));
  return quota;
}

/** Deletes the quota of `services`; false when there was none. */
export async function removeQuota(store: Store, services: string): Promise<boolean> {
  return store.delete(quotaKey(services));
}

/** Every quota, by glob. */
export async function listQuotas(store: Store): Promise<Quota[]> {
  return (await store.list(quotaPrefix)).map((kv) => JSON.parse(kv.value) as Quota);
}
