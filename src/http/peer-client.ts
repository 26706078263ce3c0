import { request } from 'undici';
import type { Store } from '../store/store.js';
import { componentKey, type Component } from '../store/keys.js';
import { HttpError, badGateway, unavailable } from './errors.js';

export interface PeerReply<T> {
  status: number;
  body: T;
}

/**
 * Calls another role found through its announcement key (or a fixed URL given by flag).
 * A peer that is not announced or not answering → 503 naming it; its 4xx → the same status
 * and message; its 5xx → 502 naming it. A failing peer never turns into a 2xx.
 */
export class PeerClient {
  constructor(
    private readonly store: Store,
    readonly component: Component,
    private readonly fixedUrl?: string,
  ) {}

  async baseUrl(): Promise<string> {
    if (this.fixedUrl) return this.fixedUrl.replace(/\/$/, '');
    const announced = await this.store.get(componentKey(this.component));
    if (!announced) throw unavailable(`${this.component} is not announced in the store (${componentKey(this.component)})`);
    return `http://${announced.value}`;
  }

  async call<T>(method: 'GET' | 'POST' | 'PATCH' | 'DELETE', path: string, body?: unknown, timeoutMs = 15_000): Promise<PeerReply<T>> {
    const base = await this.baseUrl();
    let response;
    try {
      response = await request(`${base}${path}`, {
        method,
        headers: body === undefined ? {} : { 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      });
    } catch (error) {
      throw unavailable(`${this.component} at ${base} is not answering: ${(error as Error).message}`);
    }
    const text = await response.body.text();
    const parsed = text ? safeJson(text) : undefined;
    if (response.statusCode >= 500) {
      throw badGateway(`${this.component} failed (${response.statusCode}): ${messageOf(parsed) ?? text.slice(0, 200)}`);
    }
    if (response.statusCode >= 400) {
      throw new HttpError(response.statusCode, messageOf(parsed) ?? `${this.component} answered ${response.statusCode}`);
    }
    return { status: response.statusCode, body: parsed as T };
  }
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

const messageOf = (body: unknown): string | undefined =>
  body && typeof body === 'object' && typeof (body as { message?: unknown }).message === 'string'
    ? (body as { message: string }).message
    : undefined;
