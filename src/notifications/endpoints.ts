import { randomBytes } from 'node:crypto';
import type { Store } from '../store/store.js';
import { notifyEndpointKey, notifyEndpointPrefix } from '../store/keys.js';
import { listRecords } from '../store/json-records.js';
import type { NotifyEndpoint, NotifyEndpointCreate, NotifyEndpointRecord } from '../schemas/notification.js';

// Every write of a notification endpoint: add and remove (the orchestrator, for admins), and the
// listing people see. The store keeps the secret, since deliveries are signed with it (a hash
// would not do); it leaves this module only towards the leading scheduler's sender.

/** More endpoints than this is a mistake, not a policy: each event is delivered to each of them. */
export const MAX_ENDPOINTS = 100;

export class EndpointUrlError extends Error {
  override name = 'EndpointUrlError';
}

/** The URL as the endpoint keeps it, or an EndpointUrlError naming the rule it breaks. */
export function endpointUrl(text: string): string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new EndpointUrlError('url must be an http:// or https:// URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new EndpointUrlError('url must be an http:// or https:// URL');
  if (url.username || url.password) throw new EndpointUrlError('url must not carry credentials (user:password@): each delivery is signed with the endpoint\'s secret');
  if (!url.hostname) throw new EndpointUrlError('url must name a host');
  return url.href;
}

/** The URL without its path and query, for logs: a Slack webhook's path is its secret. */
export const endpointOrigin = (url: string): string => new URL(url).origin;

const withoutSecret = ({ secret: _secret, ...endpoint }: NotifyEndpointRecord): NotifyEndpoint => endpoint;

/** Adds an endpoint with a new secret; undefined when MAX_ENDPOINTS exist already. */
export async function addEndpoint(store: Store, spec: NotifyEndpointCreate, now = Date.now()): Promise<{ endpoint: NotifyEndpoint; secret: string } | undefined> {
  if ((await store.list(notifyEndpointPrefix)).length >= MAX_ENDPOINTS) return undefined;
  const record: NotifyEndpointRecord = {
    id: randomBytes(6).toString('hex'),
    url: endpointUrl(spec.url),
    ...(spec.services === undefined ? {} : { services: spec.services }),
    ...(spec.events === undefined ? {} : { events: spec.events }),
    createdAt: new Date(now).toISOString(),
    secret: `whsec_${randomBytes(32).toString('base64url')}`,
  };
  await store.put(notifyEndpointKey(record.id), JSON.stringify(record));
  return { endpoint: withoutSecret(record), secret: record.secret };
}

/** Every endpoint as people see it: never the secret. */
export async function listEndpoints(store: Store): Promise<NotifyEndpoint[]> {
  return (await listRecords<NotifyEndpointRecord>(store, notifyEndpointPrefix)).map(withoutSecret);
}

/** Returns false when there was no such endpoint. */
export const removeEndpoint = (store: Store, id: string): Promise<boolean> => store.delete(notifyEndpointKey(id));
