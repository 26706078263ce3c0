import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { ErrorReply, NameParams, ServiceName, UnitName, errorResponses, textResponse, writeRefusals } from './common.js';
import { CreatedReply, OrchestratorServiceCreate, Service, ServiceConfig, ServiceConfigPatch, ServiceDeleteQuery } from './service.js';
import { DeployReply, ManualDeployRequest, Release, VersionParams, getDeploymentSchema, journalSchema, listDeploymentsSchema, rollbackSchema } from './release.js';
import { VersionsReply } from './component.js';
import { JobOutputQuery, JobParams, getJobSchema, listJobsSchema, startJobSchema, stopJobSchema } from './job.js';
import { ClusterUnit, Machine, MachineDrain, MachineDrainRequest, MachineParams } from './cluster.js';
import { splitRouteKey, type RouteKey } from './route-key.js';
import { bootstrapTokenSchema, createTokenSchema, listTokensSchema, revokeTokenSchema } from './token.js';
import { endSessionSchema, sessionSchema, startSessionSchema } from './session.js';
import { addEndpointSchema, listDeliveriesSchema, listEndpointsSchema, removeEndpointSchema } from './notification.js';
import { listRegistryLoginsSchema, registryLoginSchema, registryLogoutSchema, serviceTagsSchema } from './registry.js';
import { listQuotasSchema, removeQuotaSchema, setQuotaSchema } from './quota.js';
import { addCertificateSchema, listCertificatesSchema, removeCertificateSchema, serviceCertificateSchema } from './certificate.js';
import { ServiceMetrics } from './service-metrics.js';
import type { Access, ServiceSource } from '../auth/access.js';

// The orchestrator's API, one entry per route: the key is its method and path, the value its
// schemas. The orchestrator registers its routes from this table (and the OpenAPI document follows
// from them); the CLI client and the dashboard name the key of each call they make and take its
// types from here. Each route is written down once, with the right a call of it needs.

interface RouteSchema {
  /** One line for the OpenAPI document (else the first sentence of the description). */
  summary?: string;
  description?: string;
  params?: TSchema;
  querystring?: TSchema;
  body?: TSchema;
  response: Record<number, TSchema | ReturnType<typeof textResponse>>;
  /**
   * What the route needs beyond the default (a GET needs a read token, any other method an admin
   * token; see src/auth/access.ts), and where it finds the service a deploy token must match.
   */
  access?: Access;
  service?: ServiceSource;
}

const deployOnName = { access: 'deploy', service: { param: 'name' } } as const;

export const orchestratorApi = {
  'POST /services': {
    description: 'Declare a service (orchestrator form).',
    body: OrchestratorServiceCreate,
    response: { 201: CreatedReply, ...errorResponses, 413: ErrorReply, ...writeRefusals },
  },
  'GET /services': { summary: 'List services', response: { 200: Type.Array(Service), ...errorResponses } },
  'GET /services/:name': { summary: 'Get a service', params: NameParams, response: { 200: Service, ...errorResponses } },
  'DELETE /services/:name': {
    description:
      "Stop the units of the service, then delete its declaration. Its units' named volumes stay unless `volumes=delete`: then every registered machine's agent removes them before the declaration goes (a machine that cannot be reached fails the call, which can be repeated).",
    params: NameParams,
    querystring: ServiceDeleteQuery,
    response: { 204: Type.Null(), ...errorResponses },
  },
  'GET /services/:name/config/next': { summary: 'The next config (what the next deploy uses)', params: NameParams, response: { 200: ServiceConfig, ...errorResponses } },
  'PATCH /services/:name/config/next': {
    description: 'Change the next config (JSON merge patch: env keys set, null removes). Takes effect at the next deploy.',
    params: NameParams,
    body: ServiceConfigPatch,
    response: { 200: ServiceConfig, ...errorResponses, 413: ErrorReply, ...writeRefusals },
    ...deployOnName,
  },
  'GET /services/:name/config/last': { description: 'The config of the latest release.', params: NameParams, response: { 200: Release, ...errorResponses } },
  'GET /services/:name/config/history': { description: 'Every release, oldest first.', params: NameParams, response: { 200: Type.Array(Release), ...errorResponses } },
  'GET /services/:name/config/history/:version': { summary: 'One release', params: VersionParams, response: { 200: Release, ...errorResponses } },
  'POST /services/:name/deploy': {
    description: "Deploy the service's image (or the given reference of the same repository) with its next config.",
    params: NameParams,
    body: Type.Optional(ManualDeployRequest),
    response: { 200: DeployReply, ...errorResponses, ...writeRefusals },
    ...deployOnName,
  },
  'POST /services/:name/rollback': { ...rollbackSchema, params: NameParams, ...deployOnName },
  'GET /services/:name/units': { summary: 'The units of a service', params: NameParams, response: { 200: Type.Array(ClusterUnit), ...errorResponses } },
  'GET /services/:name/units/:unit/logs': {
    description:
      "A unit's container output as text, from the agent of its machine; `follow` streams. `previous`: the last output kept of the unit's newest failed container (`platform logs NAME N --previous`), after a line naming its deployment, release and how it ended; 404 when none is kept.",
    params: Type.Object({ name: ServiceName, unit: UnitName }),
    querystring: Type.Object({
      tail: Type.Integer({ minimum: 0, maximum: 100_000, default: 100 }),
      follow: Type.Boolean({ default: false }),
      previous: Type.Boolean({ default: false, description: "the kept output of the unit's newest failed container (at most 100 lines)" }),
    }),
    // The agent's stream, passed on as it comes (so no type to check it against).
    response: { 200: textResponse('text/plain', 'The unit\'s output, stdout and stderr interleaved.'), 429: ErrorReply, ...errorResponses },
  },
  'GET /services/:name/metrics': {
    description:
      "The service's last hour for the dashboard's graphs, one point per --metrics-interval: requests per second, 5xx answers per second and the 95th percentile of the time to answer, summed over every gateway (both data planes), and each unit's CPU (cores) and memory (bytes) as its machine's engine reports them. " +
      'Gateways and agents that do not answer are named in `unreachable` (their share is missing); 502 when none answers. See docs/dashboard.md "Graphs".',
    params: NameParams,
    response: { 200: ServiceMetrics, ...errorResponses, 502: ErrorReply },
  },
  'GET /services/:name/tags': serviceTagsSchema,
  'POST /services/:name/jobs': { ...startJobSchema, ...deployOnName },
  'GET /jobs': listJobsSchema,
  'GET /services/:name/jobs/:id': getJobSchema,
  'DELETE /services/:name/jobs/:id': { ...stopJobSchema, ...deployOnName },
  'GET /services/:name/jobs/:id/output': {
    description:
      "A job's output as text: the last lines its agent keeps (at most 1000), stdout and stderr interleaved (`platform logs NAME --job ID`). " +
      '`follow` streams new lines until the job ends; lines printed faster than they are kept are told as a count.',
    params: JobParams,
    querystring: JobOutputQuery,
    response: { 200: textResponse('text/plain', "The job's output."), ...errorResponses },
  },
  'PUT /services/:name/jobs/:id/stdin': {
    description:
      "Passes the request's body (`application/octet-stream`, streamed as it comes) on to the stdin of a job started with `stdin: true` (`platform run` from a terminal, or `-i`), " +
      'and closes that stdin (the command reads its end) when the body ends. Answers 204 then; 409 when the job keeps no stdin, has ended, or its stdin is attached already.',
    params: JobParams,
    response: { 204: Type.Null(), 415: ErrorReply, ...errorResponses },
    ...deployOnName,
  },
  'GET /cluster/units': { summary: 'Every unit, on every machine', response: { 200: Type.Array(ClusterUnit), 503: ErrorReply } },
  'GET /cluster/versions': {
    description: 'The store schema version and every running role: its machine, address and platform version (`platform version`).',
    response: { 200: VersionsReply, 503: ErrorReply },
  },
  'GET /cluster/machines': { summary: 'Every machine, with its drain', response: { 200: Type.Array(Machine), 503: ErrorReply } },
  'PUT /cluster/machines/:id/drain': {
    description:
      'Drain a machine: no new unit is placed on it, and each of its units moves to another machine (the replacement runs before the unit is drained and stopped).',
    params: MachineParams,
    body: MachineDrainRequest,
    response: { 200: MachineDrain, ...errorResponses },
  },
  'DELETE /cluster/machines/:id/drain': {
    description: 'Stop draining a machine: new units may be placed on it again (units that moved away stay where they are).',
    params: MachineParams,
    response: { 204: Type.Null(), ...errorResponses },
  },
  'GET /deployments': listDeploymentsSchema,
  'GET /deployments/:id': { summary: 'One deployment', ...getDeploymentSchema },
  'GET /journal': journalSchema,
  'POST /tokens': createTokenSchema,
  // Tokens are an admin's, reading them too; bootstrap needs none (it works once, while none exists).
  'GET /tokens': { ...listTokensSchema, access: 'admin' },
  'DELETE /tokens/:name': revokeTokenSchema,
  'POST /tokens/bootstrap': { ...bootstrapTokenSchema, access: 'open' },
  // Notification endpoints are an admin's, reading them and their deliveries too (URLs may hold secrets).
  'POST /notifications/endpoints': addEndpointSchema,
  'GET /notifications/endpoints': { ...listEndpointsSchema, access: 'admin' },
  'DELETE /notifications/endpoints/:id': removeEndpointSchema,
  'GET /notifications/deliveries': { ...listDeliveriesSchema, access: 'admin' },
  // Registry logins are an admin's, listing them too (the hosts and users say what the cluster pulls from).
  'PUT /registries/:host': registryLoginSchema,
  'GET /registries': { ...listRegistryLoginsSchema, access: 'admin' },
  'DELETE /registries/:host': registryLogoutSchema,
  // Quotas are set and removed by an admin; reading them needs the read right (a team sees what is left).
  'PUT /quotas/:services': setQuotaSchema,
  'GET /quotas': listQuotasSchema,
  'DELETE /quotas/:services': removeQuotaSchema,
  // Certificates carry private keys in: an admin's, listing them too (a listing never holds a key).
  'POST /certificates': addCertificateSchema,
  'GET /certificates': { ...listCertificatesSchema, access: 'admin' },
  'DELETE /certificates/:host': removeCertificateSchema,
  'GET /services/:name/certificate': serviceCertificateSchema,
  // Signing in and out needs no token (signing in takes one); who one is needs the read right.
  'POST /session': { ...startSessionSchema, access: 'open' },
  'GET /session': sessionSchema,
  'DELETE /session': { ...endSessionSchema, access: 'open' },
  'GET /events': {
    description:
      'Server-Sent Events for the dashboard: a `snapshot` first, then `service`, `deployment`, `journal`, `machine` and `unit` events, ' +
      'each `{key, value}` or `{key, deleted: true}`, with the store revision as `id`. See docs/dashboard.md.',
    response: {
      200: textResponse('text/event-stream', 'The event stream, open until the client leaves (or its token or session ends).'),
      429: ErrorReply,
      503: ErrorReply,
    },
  },
} satisfies Record<RouteKey, RouteSchema>;

export type OrchestratorApi = typeof orchestratorApi;
export type OrchestratorRoute = keyof OrchestratorApi;

/**
 * Changes the orchestrator passes on to the directory or the scheduler, which journal them
 * (src/auth/audit.ts): journaled there, once, not here too.
 */
const passedOn: ReadonlySet<OrchestratorRoute> = new Set<OrchestratorRoute>([
  'POST /services',
  'DELETE /services/:name',
  'PATCH /services/:name/config/next',
  'POST /services/:name/deploy',
  'POST /services/:name/rollback',
  'POST /services/:name/jobs',
  'DELETE /services/:name/jobs/:id',
]);

/** A route of the table as Fastify registers it: method, URL, schemas and, in its config, the access it needs and whether it is journaled here. */
export function apiRoute<K extends OrchestratorRoute>(key: K) {
  const { access, service, ...schema }: RouteSchema = orchestratorApi[key];
  return { ...splitRouteKey(key), schema: schema as Omit<OrchestratorApi[K], 'access' | 'service'>, config: { access, service, ...(passedOn.has(key) ? { audit: false as const } : {}) } };
}

type Responses<K extends OrchestratorRoute> = OrchestratorApi[K]['response'];

/** What the route answers when it succeeds. */
export type ReplyOf<K extends OrchestratorRoute> = Responses<K>[Extract<keyof Responses<K>, 200 | 201 | 204>] extends infer S extends TSchema ? Static<S> : never;

type Part<K extends OrchestratorRoute, Field extends string, Name extends string> = OrchestratorApi[K] extends Record<Field, infer S extends TSchema>
  ? Record<Name, Static<S>>
  : unknown;

/** What a call of the route sends: its path parameters and body where it has them, and any query. */
export type RequestOf<K extends OrchestratorRoute> = Part<K, 'params', 'params'> &
  Part<K, 'body', 'body'> &
  (OrchestratorApi[K] extends Record<'querystring', infer S extends TSchema> ? { query?: Partial<Static<S>> } : unknown);

/** The rest parameter of a call: the request may be left out where the route needs nothing. */
export type RequestArgs<K extends OrchestratorRoute> = object extends RequestOf<K> ? [request?: RequestOf<K>] : [request: RequestOf<K>];

/** Any request, as the code that sends it sees one. */
export interface ApiRequest {
  params?: Record<string, string | number>;
  query?: Record<string, unknown>;
  body?: unknown;
}
