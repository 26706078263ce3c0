import type { FastifyRequest } from 'fastify';
import type { Store } from '../store/store.js';
import type { Component } from '../store/keys.js';
import { readAnnouncement } from '../store/records/announcements.js';
import { callerKey, passedOnAuthorization } from '../auth/caller.js';
import { relayedCallerHeaders } from '../auth/relayed-caller.js';
import { HttpError, badGateway, unavailable } from './errors.js';
import { messageOf, requestJson, type JsonMethod } from './json-request.js';

/** The calls a role makes to a peer for one caller (see PeerClient.actingFor). */
export interface PeerCaller {
  call<T>(method: JsonMethod, path: string, body?: unknown, timeoutMs?: number): Promise<PeerReply<T>>;
}

export interface PeerReply<T> {
  status: number;
  body: T;
}

/**
 * Calls another role found through its announcement key (or a fixed URL given by flag).
 * A peer that is not announced or not answering → 503 naming it; its 4xx → the same status
 * and message; its 5xx → 502 naming it. A failing peer never turns into a 2xx. Its 507 (the
 * store's space is over the platform's limit, src/store/store-space.ts) is a refusal, not a failure: passed on as it is.
 */
const INSUFFICIENT_STORAGE = 507;

export class PeerClient {
  constructor(
    private readonly store: Store,
    readonly component: Component,
    private readonly fixedUrl?: string,
  ) {}

  async baseUrl(): Promise<string> {
    if (this.fixedUrl) return this.fixedUrl.replace(/\/$/, '');
    const announced = await readAnnouncement(this.store, this.component);
    if (announced.address === undefined) throw unavailable(`${this.component} is not announced in the store (${announced.key})`);
    return `http://${announced.address}`;
  }

  /**
   * Calls made for the caller of `request`: its Authorization header (or its dashboard session, as
   * `Authorization: Session`) goes along, so the peer checks (and records) the caller's own token;
   * a role holds no credentials of its own. With a token, the caller as this role knows it goes
   * along signed (src/auth/relayed-caller.ts), so the peer counts and journals it and not this
   * role; X-Forwarded-For too, for the journal's reader. A call without one stays unmarked, or the
   * peer would not take it for the local call it is.
   */
  actingFor(request: FastifyRequest): PeerCaller {
    const authorization = passedOnAuthorization(request.headers);
    const relayKey = request.server.accessControl?.relayKey;
    const headers = async (): Promise<Record<string, string>> => {
      if (authorization === undefined) return {};
      const before = request.headers['x-forwarded-for'];
      return {
        authorization,
        'x-forwarded-for': [typeof before === 'string' ? before : undefined, request.ip].filter(Boolean).join(', '),
        ...(relayKey ? relayedCallerHeaders(relayKey, await callerKey(request)) : {}),
      };
    };
    return { call: async (method, path, body, timeoutMs) => this.call(method, path, body, timeoutMs, await headers()) };
  }

  async call<T>(method: JsonMethod, path: string, body?: unknown, timeoutMs = 15_000, headers: Record<string, string> = {}): Promise<PeerReply<T>> {
    const base = await this.baseUrl();
    let reply;
    try {
      reply = await requestJson(`${base}${path}`, method, body, timeoutMs, headers);
    } catch (error) {
      throw unavailable(`${this.component} at ${base} is not answering: ${(error as Error).message}`);
    }
    if (reply.status >= 500 && reply.status !== INSUFFICIENT_STORAGE) {
      throw badGateway(`${this.component} failed (${reply.status}): ${messageOf(reply.body) ?? reply.text.slice(0, 200)}`);
    }
    if (reply.status >= 400) {
      const retryAfter = reply.retryAfter === undefined ? undefined : Number(reply.retryAfter);
      throw new HttpError(reply.status, messageOf(reply.body) ?? `${this.component} answered ${reply.status}`, Number.isInteger(retryAfter) ? retryAfter : undefined);
    }
    return { status: reply.status, body: reply.body as T };
  }
}
