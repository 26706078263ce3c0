import type { FastifyRequest, onSendHookHandler } from 'fastify';
import type { RoleServer } from '../http/server.js';
import type { Store } from '../store/store.js';
import type { JournalActor } from '../schemas/release.js';
import { appendJournal } from '../store/records/journal.js';
import { serviceOf, type ServiceSource } from './access.js';
import { callerName } from './guard.js';
import { clientAddress } from './caller.js';
import { appendHook } from '../http/route-hooks.js';

// Every API call that changed something is journaled, with who made it: the token's name and the
// client's address. The line is written where the change is made (the directory, the scheduler,
// the orchestrator for its own drains and tokens) before the reply goes out; a route that only
// passes a call on to another role declares `audit: false` (the orchestrator's facade), as do the
// registry webhooks, which journal their deliveries themselves. Environment values and secrets
// never reach a line: a body's env is told by its variable names only.

declare module 'fastify' {
  interface FastifyContextConfig {
    /** false: not journaled here (the call is passed on, or journals itself). */
    audit?: false;
  }
}

interface AuditedRoute {
  kind: string;
  service?: ServiceSource;
  /** What the body says, for people; never a value of env or a secret. */
  describe?: (body: Record<string, unknown>) => string;
}

const tokenSpec = (body: Record<string, unknown>): string =>
  `token ${String(body.name)} (${String(body.role)}${body.services ? `, services ${String(body.services)}` : ''}${body.expiresIn ? `, expires in ${String(body.expiresIn)}` : ''})`;

/** An endpoint by its origin only: the rest of a URL may be a secret (a Slack webhook's path is). */
const endpointSpec = (body: Record<string, unknown>): string => {
  let origin = 'an invalid URL';
  try {
    origin = new URL(String(body.url)).origin;
  } catch {
    // told as invalid
  }
  return `endpoint at ${origin}${body.services ? `, services ${String(body.services)}` : ''}${Array.isArray(body.events) ? `, events ${body.events.join(', ')}` : ''}`;
};

/** Known changes by `METHOD /route`; any other change is journaled as `api.<METHOD> <route>`. */
const auditedRoutes: Record<string, AuditedRoute> = {
  'POST /services': { kind: 'service.declared', service: { body: 'name' } },
  'PATCH /services/:name': { kind: 'service.changed', service: { param: 'name' } },
  'DELETE /services/:name': { kind: 'service.deleted', service: { param: 'name' } },
  'PATCH /services/:name/config': { kind: 'config.changed', service: { param: 'name' } },
  'POST /hooks/deploy': { kind: 'deploy.requested', service: { body: 'serviceName' } },
  'POST /services/:name/rollback': { kind: 'rollback.requested', service: { param: 'name' } },
  'DELETE /services/:name/units': { kind: 'units.stop-requested', service: { param: 'name' } },
  // The program only: a command's arguments may carry a secret (a database URL with its password).
  'POST /services/:name/jobs': { kind: 'job.requested', service: { param: 'name' }, describe: (body) => `command ${Array.isArray(body.command) ? String(body.command[0]) : '?'}${body.release ? `, release ${String(body.release)}` : ''}${body.machine ? `, machine ${String(body.machine)}` : ''}` },
  'DELETE /services/:name/jobs/:id': { kind: 'job.stop-requested', service: { param: 'name' } },
  'PUT /cluster/machines/:id/drain': { kind: 'machine.drain-started' },
  'DELETE /cluster/machines/:id/drain': { kind: 'machine.drain-stopped' },
  'POST /tokens': { kind: 'token.created', describe: tokenSpec },
  'DELETE /tokens/:name': { kind: 'token.revoked' },
  'POST /tokens/bootstrap': { kind: 'token.bootstrapped' },
  'POST /notifications/endpoints': { kind: 'notify.endpoint-added', describe: endpointSpec },
  'DELETE /notifications/endpoints/:id': { kind: 'notify.endpoint-removed' },
  // The user, never the password.
  'PUT /registries/:host': { kind: 'registry.login', describe: (body) => `user ${String(body.username)}` },
  'PUT /quotas/:services': { kind: 'quota.set', describe: (body) => Object.entries(body).map(([kind, limit]) => `${kind} ${String(limit)}`).join(', ') },
  'DELETE /quotas/:services': { kind: 'quota.removed' },
  'DELETE /registries/:host': { kind: 'registry.logout' },
  // The host only: the body carries a private key.
  'POST /certificates': { kind: 'certificate.added', describe: (body) => `certificate for ${String(body.host)}` },
  'DELETE /certificates/:host': { kind: 'certificate.removed' },
};

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/** The env of a body by variable names: `env A, B set, C removed` (null removes a variable in a merge patch). */
function envNames(env: Record<string, unknown>): string {
  const set = Object.keys(env).filter((name) => env[name] !== null);
  const removed = Object.keys(env).filter((name) => env[name] === null);
  const parts = [set.length > 0 ? `${set.join(', ')} set` : '', removed.length > 0 ? `${removed.join(', ')} removed` : ''].filter(Boolean);
  return `env ${parts.length > 0 ? parts.join(', ') : 'unchanged'}`;
}

/** The fields a body sets, by name, and its env by variable names: `numInstances; env A set`. */
export function describeBody(body: unknown): string {
  if (!isObject(body)) return '';
  return Object.keys(body)
    .map((field) => (field === 'env' && isObject(body.env) ? envNames(body.env) : field))
    .join('; ');
}

/** The journal line of a call that changed something. */
export function auditLine(request: Pick<FastifyRequest, 'method' | 'url' | 'params' | 'body' | 'routeOptions'>, actor: JournalActor) {
  const route = `${request.method} ${request.routeOptions.url ?? ''}`;
  const known = auditedRoutes[route];
  const service = serviceOf(known?.service ?? request.routeOptions.config.service, request.params, request.body);
  const path = request.url.split('?')[0]!;
  const detail = known?.describe && isObject(request.body) ? known.describe(request.body) : describeBody(request.body);
  return {
    kind: known?.kind ?? `api.${route}`,
    ...(service === undefined ? {} : { service }),
    message: `${request.method} ${path}${detail ? `: ${detail}` : ''}`,
    actor,
  };
}

const MAX_FORWARDED_FOR = 200;

export function actorOf(request: FastifyRequest): JournalActor {
  const token = callerName(request);
  const forwarded = request.headers['x-forwarded-for'];
  return {
    ...(token === undefined ? {} : { token }),
    address: clientAddress(request),
    ...(typeof forwarded === 'string' ? { forwardedFor: forwarded.slice(0, MAX_FORWARDED_FOR) } : {}),
  };
}

const READS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * Journals each successful change made through this role server: installed by createRoleServer
 * (its `journal` option) before any route is registered, it gives each route that can change something (any method but GET, HEAD and OPTIONS) its
 * own onSend hook. Reads get none: a global hook cost every read a promise and a pass of Fastify's
 * onSend hook runner (issue 29: a quarter of the directory's read throughput went to such hooks).
 */
export function installAudit(server: RoleServer, store: Store): void {
  const journal: onSendHookHandler = async (request, reply, payload) => {
    if (READS.has(request.method) || reply.statusCode < 200 || reply.statusCode >= 300 || request.routeOptions.config.audit === false) return payload;
    // The change is made: a journal that cannot be written is logged, and the reply still tells the truth.
    await appendJournal(store, auditLine(request, actorOf(request))).catch((error: unknown) =>
      request.log.error({ err: error, route: request.routeOptions.url }, 'could not journal a change'),
    );
    return payload;
  };
  server.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    if (methods.every((method) => READS.has(method))) return;
    route.onSend = appendHook(route.onSend, journal);
  });
}
