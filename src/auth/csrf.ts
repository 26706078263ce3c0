import type { IncomingHttpHeaders } from 'node:http';
import { HttpError } from '../http/errors.js';
import type { RequestRule } from '../http/request-rules.js';
import { sessionCredential } from './caller.js';

// A browser sends its cookies with every request to this server, whatever page makes it, and a
// page anywhere can post a form here. So a change that comes from a browser (it carries an Origin
// header or the session cookie) and presents no Authorization header must come from a page of
// this origin (or one --cors-origin allows) and send JSON, which no form can and no other page
// may without this server's CORS consent. The CLI and the webhooks present a token or are no
// browser, and are not held to it.

const READS = new Set(['GET', 'HEAD', 'OPTIONS']);
const RULE = 'a change made from a browser';

export interface BrowserCall {
  method: string;
  headers: IncomingHttpHeaders;
}

/** Why a call breaks the rule, or undefined when it keeps it (or is not held to it). */
export function csrfRefusal(call: BrowserCall, allowedOrigins: readonly string[] = []): string | undefined {
  const { headers } = call;
  if (READS.has(call.method) || headers.authorization !== undefined) return undefined;
  const origin = headers.origin;
  const hasCookie = sessionCredential(headers)?.from === 'cookie';
  if (origin === undefined && !hasCookie) return undefined;
  if (origin === undefined) return `${RULE} with the session cookie must carry an Origin header (browsers send one)`;
  if (!isOwnOrigin(origin, headers.host) && !allowedOrigins.includes(origin)) {
    return `${RULE} must come from a page of this server (${headers.host ?? 'no Host'}), not ${origin}; --cors-origin allows others`;
  }
  const type = headers['content-type'];
  const hasBody = type !== undefined || Number(headers['content-length'] ?? 0) > 0 || headers['transfer-encoding'] !== undefined;
  if (hasBody && !/^application\/json\s*(;|$)/i.test(type ?? '')) {
    return `${RULE} must send Content-Type: application/json${type === undefined ? '' : `, not ${type}`}`;
  }
  return undefined;
}

const isOwnOrigin = (origin: string, host: string | undefined): boolean => {
  try {
    return host !== undefined && new URL(origin).host === host.toLowerCase();
  } catch {
    return false;
  }
};

/** Refuses, with 403 naming the rule, every change from a browser that breaks it. */
export const csrfRequestRule =
  (allowedOrigins: readonly string[] = []): RequestRule =>
  (request) => {
    const refusal = csrfRefusal(request, allowedOrigins);
    return refusal ? new HttpError(403, refusal) : undefined;
  };
