import { request } from 'undici';

// One JSON request over HTTP, for every client of the platform's APIs (peer roles, the CLI):
// the body sent as JSON, the reply read whole and parsed when it is JSON. Network failures throw;
// HTTP statuses are the caller's to interpret.

export type JsonMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

export interface JsonReply {
  status: number;
  /** The parsed body, or the raw text when it is not JSON, or undefined when empty. */
  body: unknown;
  text: string;
  /** The Retry-After header of a refusal, when it has one. */
  retryAfter?: string;
}

export async function requestJson(url: string, method: JsonMethod, body?: unknown, timeoutMs = 15_000, headers: Record<string, string> = {}): Promise<JsonReply> {
  const response = await request(url, {
    method,
    headers: body === undefined ? headers : { ...headers, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
  });
  const text = await response.body.text();
  const retryAfter = response.headers['retry-after'];
  return { status: response.statusCode, body: text ? parseOrText(text) : undefined, text, ...(typeof retryAfter === 'string' ? { retryAfter } : {}) };
}

/** The text parsed as JSON, or the text itself when it is not JSON. */
export function parseOrText(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** The `message` of an error reply `{statusCode, error, message}`, if it has one. */
export const messageOf = (body: unknown): string | undefined =>
  body && typeof body === 'object' && typeof (body as { message?: unknown }).message === 'string'
    ? (body as { message: string }).message
    : undefined;
