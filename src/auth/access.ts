import type { TokenRecord, TokenRole } from '../schemas/token.js';
import { compileServiceGlob } from '../service-glob.js';

// The pure decision: may this token do what this route needs, on this service? Routes declare
// what they need in their Fastify config (`config: { access: 'deploy', service: { param: 'name' } }`,
// typed in guard.ts; the orchestrator's come from its API table, src/schemas/api.ts);
// a route that declares nothing needs `read` for GET and HEAD and `admin` for anything else.

/** `open`: no token is ever needed (health, readiness, API documentation, the registry webhooks, bootstrap). */
export type Access = TokenRole | 'open';

/** Where a route finds the service its call acts on. */
export type ServiceSource = { param: string } | { body: string };

export interface RouteAccess {
  access: Access;
  service?: ServiceSource;
}

const rank: Record<TokenRole, number> = { read: 0, deploy: 1, admin: 2 };

/** What a route needs: what it declares, else `read` for reads and `admin` for every change. */
export function routeAccess(method: string, declared: { access?: Access; service?: ServiceSource } | undefined): RouteAccess {
  const access = declared?.access ?? (method === 'GET' || method === 'HEAD' ? 'read' : 'admin');
  return declared?.service ? { access, service: declared.service } : { access };
}

/** The service a call acts on, read from its path parameters or its body (undefined when absent or not a string). */
export function serviceOf(source: ServiceSource | undefined, params: unknown, body: unknown): string | undefined {
  if (!source) return undefined;
  const from = 'param' in source ? (params as Record<string, unknown> | undefined)?.[source.param] : (body as Record<string, unknown> | null | undefined)?.[source.body];
  return typeof from === 'string' ? from : undefined;
}

export const isExpired = (token: Pick<TokenRecord, 'expiresAt'>, now: number): boolean =>
  token.expiresAt !== undefined && Date.parse(token.expiresAt) <= now;

export type Decision = { allowed: true } | { allowed: false; status: 403; message: string };

/** One answer shared by every allowed call: deciding costs no allocation. */
const ALLOWED: Decision = Object.freeze({ allowed: true });

const matchers = new Map<string, (name: string) => boolean>();
const globMatches = (glob: string, name: string): boolean => {
  let matches = matchers.get(glob);
  if (!matches) {
    matches = compileServiceGlob(glob);
    matchers.set(glob, matches);
  }
  return matches(name);
};

/**
 * May `token` (known, unexpired) make a call that needs `access` on `service`? A scope (the
 * token's services glob) limits only deploy rights: a scoped token reads everything.
 */
export function decide(token: Pick<TokenRecord, 'name' | 'role' | 'services'>, access: Access, service: string | undefined): Decision {
  if (access === 'open') return ALLOWED;
  if (rank[token.role] < rank[access]) {
    return { allowed: false, status: 403, message: `token ${token.name} has the ${token.role} role; this call needs ${access}` };
  }
  if (access !== 'deploy' || token.role === 'admin' || token.services === undefined) return ALLOWED;
  if (service === undefined) {
    return { allowed: false, status: 403, message: `token ${token.name} may deploy only services matching ${token.services}, and this call names no service` };
  }
  if (!globMatches(token.services, service)) {
    return { allowed: false, status: 403, message: `token ${token.name} may deploy only services matching ${token.services}, not ${service}` };
  }
  return ALLOWED;
}
