import type { IncomingMessage } from 'node:http';
import type { Readable } from 'node:stream';

// One JSON request over HTTP, for every client of the platform's APIs (peer roles, the CLI):
// the body sent as JSON, the reply read whole and parsed when it is JSON. Network failures throw
// with the network's reason; HTTP statuses are the caller's to interpret. Node's own http module,
// not undici's `request` or fetch: loading the undici package's hundred modules was about half of
// every CLI command's start-up CPU, and compiling Node's bundled copy for fetch another 60 ms
// (issue 31, bench/cli-startup.ts); node:http is already loaded.

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
  const payload = body === undefined ? undefined : JSON.stringify(body);
  const response = await sendRequest(url, {
    method,
    headers: payload === undefined ? headers : { ...headers, 'content-type': 'application/json' },
    body: payload,
    idleTimeoutMs: timeoutMs,
  });
  const text = await textOf(response);
  const retryAfter = response.headers['retry-after'];
  return { status: response.statusCode ?? 0, body: text ? parseOrText(text) : undefined, text, ...(typeof retryAfter === 'string' ? { retryAfter } : {}) };
}

/** An answer's body read whole, as UTF-8 text. */
export async function textOf(response: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of response) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

export interface SentRequest {
  method: JsonMethod;
  headers: Record<string, string>;
  /** Text sent whole, or a stream sent as it comes (chunked). */
  body?: string | Readable;
  /** The longest silence of the connection, waiting for the answer or while reading it; 0: none once the headers came. */
  idleTimeoutMs: number;
  /** The longest wait for the answer's headers, when it differs from idleTimeoutMs. */
  headersTimeoutMs?: number;
  signal?: AbortSignal;
}

/** Sends one request and resolves with the answer once its headers came (its body to be read). */
export async function sendRequest(url: string, sent: SentRequest): Promise<IncomingMessage> {
  const target = new URL(url);
  // https is loaded only for an https URL: TLS costs a command that does not use it.
  const { request } = target.protocol === 'https:' ? await import('node:https') : await import('node:http');
  return new Promise((resolve, reject) => {
    const outgoing = request(target, {
      method: sent.method,
      headers: typeof sent.body === 'string' ? { ...sent.headers, 'content-length': String(Buffer.byteLength(sent.body)) } : sent.headers,
      ...(sent.signal ? { signal: sent.signal } : {}),
    });
    const waitMs = sent.headersTimeoutMs ?? sent.idleTimeoutMs;
    outgoing.setTimeout(waitMs, () => outgoing.destroy(new Error(`no answer within ${waitMs} ms`)));
    outgoing.once('error', reject);
    outgoing.once('response', (response) => {
      outgoing.setTimeout(sent.idleTimeoutMs, () => response.destroy(new Error(`the answer stopped for ${sent.idleTimeoutMs} ms`)));
      resolve(response);
    });
    if (typeof sent.body === 'object') sent.body.pipe(outgoing);
    else outgoing.end(sent.body);
  });
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
