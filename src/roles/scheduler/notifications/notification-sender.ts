import { request } from '../../../http/undici-request.js';
import type { NotifyDelivery } from '../../../schemas/notification.js';
import type { AttemptResult } from '../../../notifications/outbox.js';
import { SIGNATURE_HEADER, signBody } from '../../../notifications/signature.js';
import { RegistryAllowList, refusalIn } from '../../../http/registry-policy.js';
import { DestinationPolicy } from '../../../http/destination-policy.js';

// One delivery attempt: a signed POST of the event, bounded by a timeout. Redirects are never
// followed (undici's request does not; a 3xx is a failed attempt naming where it pointed), so an
// endpoint cannot send the signed body on to another host. The response body is read and dropped.
// Errors name the host at most, never the URL's path (a Slack webhook's path is its secret).

/** How much of a response body is read before the connection is dropped. */
const MAX_RESPONSE_BYTES = 64 * 1024;

/** What a delivery refused its destination says: the registries' rule, checked again at each attempt since DNS can change. */
const DESTINATION_RULE = 'endpoints on loopback, private, link-local and other special addresses need --allowed-notification-destination';

export class NotificationSender {
  private readonly destinations: DestinationPolicy;

  /** `allowedDestinations`: --allowed-notification-destination. */
  constructor(
    private readonly timeoutMs: number,
    allowedDestinations: readonly string[] = [],
  ) {
    const allowed = new RegistryAllowList(allowedDestinations, '--allowed-notification-destination');
    this.destinations = new DestinationPolicy(allowed, { connectTimeout: timeoutMs, headersTimeout: timeoutMs, bodyTimeout: timeoutMs, connections: 8 });
  }

  async send(delivery: NotifyDelivery, secret: string): Promise<AttemptResult> {
    const body = JSON.stringify(delivery.event);
    try {
      const dispatcher = await this.destinations.dispatcherFor(new URL(delivery.url));
      const response = await request(delivery.url, {
        method: 'POST',
        dispatcher,
        signal: AbortSignal.timeout(this.timeoutMs),
        headers: {
          'content-type': 'application/json',
          'user-agent': 'platform-notify',
          'x-platform-event': delivery.event.event,
          'x-platform-event-id': delivery.event.id,
          'x-platform-delivery-attempt': String(delivery.attempts + 1),
          [SIGNATURE_HEADER]: signBody(secret, body),
        },
        body,
      });
      await drain(response.body);
      const { statusCode } = response;
      if (statusCode >= 300 && statusCode < 400) return { statusCode, error: `redirect ${statusCode} to ${redirectHost(response.headers.location)} not followed` };
      return statusCode >= 200 && statusCode < 300 ? { statusCode } : { statusCode, error: `HTTP ${statusCode}` };
    } catch (error) {
      const refused = refusalIn(error);
      return { error: refused ? `${refused.message}; ${DESTINATION_RULE}` : attemptError(error, this.timeoutMs) };
    }
  }

  close(): Promise<void> {
    return this.destinations.close();
  }
}

async function drain(body: AsyncIterable<Buffer> & { destroy(): void }): Promise<void> {
  let read = 0;
  for await (const chunk of body) {
    read += chunk.length;
    if (read > MAX_RESPONSE_BYTES) {
      body.destroy();
      return;
    }
  }
}

function redirectHost(location: string | string[] | undefined): string {
  const text = Array.isArray(location) ? location[0] : location;
  if (!text) return 'nowhere';
  try {
    // A relative location resolves against this base, which no real URL names.
    const host = new URL(text, 'http://relative.invalid').host;
    return host === 'relative.invalid' ? 'the same host' : host;
  } catch {
    return 'an invalid location';
  }
}

function attemptError(error: unknown, timeoutMs: number): string {
  const name = (error as Error).name;
  if (name === 'TimeoutError' || name === 'AbortError' || /timeout/i.test(name)) return `no answer within ${timeoutMs / 1000} s`;
  const code = (error as NodeJS.ErrnoException).code;
  const message = (error as Error).message || String(error);
  return code && !message.includes(code) ? `${code}: ${message}` : message;
}
