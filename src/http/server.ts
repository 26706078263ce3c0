import Fastify, { LogController, type FastifyError, type FastifyInstance, type FastifyBaseLogger, type RawServerDefault } from 'fastify';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Ajv } from 'ajv';
import addFormats from 'ajv-formats';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { Type } from '@sinclair/typebox';
import { notFound, renderError, statusName } from './errors.js';
import { claimProcessSeries, metricsContentType, metricsOf, observeRequests } from './metrics.js';
import { openapiOptions } from './openapi.js';
import { ErrorReply } from '../schemas/common.js';
import { discardBody } from './oversized-body.js';
import { bodyCharsetRequestRule } from './body-charset.js';
import { installAccessControl, isKnownCaller, type AccessControl } from '../auth/guard.js';
import { csrfRequestRule } from '../auth/csrf.js';
import { installAudit } from '../auth/audit.js';
import type { Store } from '../store/store.js';
import { corsRequestRules, installCorsPreflight } from './cors.js';
import { createLimitedServer, defaultConnectionLimits, type ConnectionLimits } from './connection-limits.js';
import { hostRequestRule } from './host-rule.js';
import { installRequestRules } from './request-rules.js';
import { serializersOnFirstUse, validatorOnFirstUse } from './schema-compilers.js';
import { lazyRequestLogger } from './request-logger.js';

export type RoleServer = FastifyInstance<RawServerDefault, IncomingMessage, ServerResponse, FastifyBaseLogger, TypeBoxTypeProvider>;

export interface RoleServerOptions {
  /** The role's name, for logs, metrics and the OpenAPI title. */
  role: string;
  logger: FastifyBaseLogger | boolean;
  /** Resolves when the role can serve (store and peers reachable); rejects with the reason. */
  readiness: () => Promise<Record<string, unknown>>;
  /**
   * What /healthz says besides the status and the role, to any caller: the scheduler says whether
   * it leads, which its announce sidekick needs and, without a token, could not learn from /readyz.
   */
  health?: () => Record<string, unknown>;
  bodyLimit?: number;
  /** Who may call: the --auth mode and the token records (src/auth/guard.ts). */
  access: AccessControl;
  /** Timeouts and connection caps (src/http/connection-limits.ts); the API roles' defaults without. */
  limits?: ConnectionLimits;
  /**
   * The store whose journal records each change made through this server (src/auth/audit.ts). Set
   * here, not by the role, so the hook is in place before any route: a route registered earlier
   * would be unaudited.
   */
  journal?: Store;
}

const NO_AUTH_WARNING = 'access control is off (--auth none): every call is accepted, with or without a token';

// Bodies are validated strictly (no type coercion, unknown fields rejected); query strings and
// path parameters are text on the wire, so they are coerced to the schema's types. Exported for
// the checks a route makes beyond its own schema (the GitHub hook's reading of an event).
export function buildAjv(coerceTypes: boolean): Ajv {
  const ajv = new Ajv({ allErrors: true, coerceTypes, removeAdditional: false, useDefaults: true, verbose: true, strict: false });
  (addFormats as unknown as (ajv: Ajv) => void)(ajv);
  return ajv;
}

export async function createRoleServer(options: RoleServerOptions): Promise<RoleServer> {
  const server = Fastify({
    loggerInstance: typeof options.logger === 'boolean' ? undefined : options.logger,
    logger: typeof options.logger === 'boolean' ? options.logger : undefined,
    bodyLimit: options.bodyLimit ?? 1024 * 1024,
    // Per-request lines would drown the log; metrics count requests instead.
    logController: new LogController({ disableRequestLogging: true }),
    // A request's child logger is made when it first logs, not for every request (request-logger.ts).
    // Without a logger Fastify hands requests its null logger itself, which costs nothing.
    childLoggerFactory: options.logger === false ? undefined : lazyRequestLogger,
    forceCloseConnections: true,
    // Fastify's own timeouts are off by default; the server it listens with sets them all, and
    // answers the client errors its parser raises (naming the timeout a request hit).
    serverFactory: (handler: (request: IncomingMessage, response: ServerResponse) => void) =>
      createLimitedServer(options.role, options.limits ?? defaultConnectionLimits, handler),
    clientErrorHandler: () => undefined,
    schemaController: { compilersFactory: { buildSerializer: serializersOnFirstUse() } },
  } as Parameters<typeof Fastify>[0]).withTypeProvider<TypeBoxTypeProvider>() as unknown as RoleServer;

  const bodyAjv = buildAjv(false);
  const textAjv = buildAjv(true);
  server.setValidatorCompiler(({ schema, httpPart }) => validatorOnFirstUse(httpPart === 'body' ? bodyAjv : textAjv, schema));
  server.setErrorHandler<FastifyError>(async (error, request, reply) => {
    if (error.statusCode === 413) await discardBody(request.raw);
    renderError(error, request, reply);
  });
  server.setNotFoundHandler((request) => {
    throw notFound(`no route ${request.method} ${request.url.split('?')[0]}`);
  });
  observeRequests(server, options.role);
  claimProcessSeries(server);
  // First of the checks: a foreign Host (DNS rebinding) is refused before CORS, CSRF and credentials.
  installRequestRules(server, [
    hostRequestRule(options.access.hosts),
    ...corsRequestRules(options.access.corsOrigins ?? []),
    csrfRequestRule(options.access.corsOrigins),
    bodyCharsetRequestRule,
  ]);
  installCorsPreflight(server, options.access.corsOrigins ?? []);
  // The API's description is no secret; the swagger-ui plugin's routes cannot be given a config otherwise.
  server.addHook('onRoute', (route) => {
    if (route.url.startsWith('/documentation')) route.config = { ...route.config, access: 'open' };
  });
  installAccessControl(server, options.access);
  if (options.journal) installAudit(server, options.journal);
  if (options.access.mode === 'none') server.log.warn(NO_AUTH_WARNING);

  await server.register(swagger, openapiOptions(options.role, ErrorReply));
  await server.register(swaggerUi, { routePrefix: '/documentation' });

  server.get('/healthz', { schema: { hide: true }, config: { access: 'open' } }, async () => ({ status: 'ok', role: options.role, ...options.health?.() }));
  server.get(
    '/readyz',
    {
      schema: {
        description:
          'Ready when the store and the peers this role needs answer; `auth` is the --auth mode. ' +
          'Only callers with a token, and local calls under --auth auto, get the details and what failed; others get the status alone.',
        response: { 200: Type.Any(), 503: Type.Any() },
      },
      config: { access: 'open' },
    },
    async (request, reply) => {
      // An anonymous caller learns whether the role is ready, not where its store is or what runs it (L7).
      const detailed = await isKnownCaller(options.access, request, reply);
      const auth = options.access.mode === 'none' ? { auth: 'none', warning: NO_AUTH_WARNING } : { auth: options.access.mode };
      try {
        const details = await options.readiness();
        return detailed ? { status: 'ready', role: options.role, ...auth, ...details } : { status: 'ready' };
      } catch (error) {
        const message = detailed ? (error as Error).message : 'not ready';
        return reply.status(503).send({ statusCode: 503, error: statusName(503), message });
      }
    },
  );
  server.get('/metrics', { schema: { hide: true } }, async (_request, reply) => {
    void reply.header('content-type', metricsContentType);
    return metricsOf(server, options.role);
  });
  return server;
}
