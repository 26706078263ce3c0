import { createHmac } from 'node:crypto';

// Deliveries are signed as GitHub signs its webhooks: `X-Platform-Signature-256: sha256=<hex>`, the
// HMAC-SHA256 of the exact body bytes with the endpoint's secret. A receiver computes the same over
// the raw body it read and compares in constant time (docs/notifications.md).

export const SIGNATURE_HEADER = 'x-platform-signature-256';

export const signBody = (secret: string, body: string | Buffer): string => `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
