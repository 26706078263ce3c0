import type { ApiRequest, OrchestratorRoute, ReplyOf, RequestArgs } from '../../schemas/api.js';
import { requestLine } from '../../schemas/route-key.js';

// Calls to the orchestrator API, relative to the page so the dashboard works wherever it is
// served. Each call names its route in the API table (src/schemas/api.ts), which types it.

// The session's proof (src/auth/session.ts): the sign-in answer's half of the session, kept in
// storage only this page's origin reads (a unit on another port of the host gets the cookie, not
// this) and sent beside the cookie on every call. localStorage, not sessionStorage, so every tab
// of the dashboard shares the one cookie's session.
const PROOF_KEY = 'platform.sessionProof';
const PROOF_HEADER = 'x-platform-session-proof';

export const keepSessionProof = (proof: string): void => localStorage.setItem(PROOF_KEY, proof);
export const forgetSessionProof = (): void => localStorage.removeItem(PROOF_KEY);

/** The headers every call of the page carries: the session's proof, when the page signed in. */
export function sessionHeaders(): Record<string, string> {
  const proof = localStorage.getItem(PROOF_KEY);
  return proof === null ? {} : { [PROOF_HEADER]: proof };
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** The method of a call and its URL relative to the page (`services/web`, not `/services/web`). */
export function pageRequest<K extends OrchestratorRoute>(route: K, ...[request]: RequestArgs<K>): { method: string; url: string } {
  const { params, query } = (request ?? {}) as ApiRequest;
  const { method, path } = requestLine(route, params, query);
  return { method, url: path.slice(1) };
}

export async function api<K extends OrchestratorRoute>(route: K, ...args: RequestArgs<K>): Promise<ReplyOf<K>> {
  const { method, url } = pageRequest(route, ...args);
  const body = (args[0] as ApiRequest | undefined)?.body;
  let response: Response;
  try {
    response = await fetch(url, {
      method,
      headers: body === undefined ? sessionHeaders() : { ...sessionHeaders(), 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (error) {
    throw new ApiError(0, `the orchestrator is not answering (${(error as Error).message})`);
  }
  const text = await response.text();
  let parsed: unknown;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = text;
  }
  if (!response.ok) {
    const message = parsed && typeof parsed === 'object' && 'message' in parsed ? String(parsed.message) : `${response.status} ${response.statusText}`;
    throw new ApiError(response.status, message);
  }
  return parsed as ReplyOf<K>;
}
