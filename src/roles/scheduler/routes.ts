import { Type } from '@sinclair/typebox';
import type { RoleServer } from '../../http/server.js';
import { notFound, unavailable } from '../../http/errors.js';
import { ErrorReply, NameParams, ServiceName, errorResponses } from '../../schemas/common.js';
import { Deployment, DeployReply, DeployRequest, JournalEntry, Release, RollbackRequest, versionNumber } from '../../schemas/release.js';
import type { Scheduler } from './scheduler.js';
import { getRelease, listReleases } from './releases.js';
import { getDeployment, listDeployments } from './deployments.js';
import { readJournal } from './journal.js';

const VersionParams = Type.Object({
  name: ServiceName,
  version: Type.String({ pattern: '^v?[1-9][0-9]{0,8}$', description: 'a release version: v1, v2, … (or 1, 2, …)' }),
});
const IdParams = Type.Object({ id: Type.String({ pattern: '^[a-z0-9-]{1,64}$', description: 'a deployment id' }) });

export function schedulerRoutes(server: RoleServer, scheduler: Scheduler): void {
  const { store } = scheduler;

  server.post(
    '/hooks/deploy',
    {
      schema: {
        description: 'Deploy a declared service: pin the image to its digest, record a release, roll it out.',
        body: DeployRequest,
        response: { 200: DeployReply, ...errorResponses },
      },
    },
    async (request) => scheduler.deploy({ ...request.body, trigger: 'manual' }),
  );

  server.post(
    '/services/:name/rollback',
    {
      schema: {
        description: "Deploy an earlier release's digest and config as a new release that records where it came from.",
        params: NameParams,
        body: RollbackRequest,
        response: { 200: DeployReply, ...errorResponses },
      },
    },
    async (request) => scheduler.rollback(request.params.name, versionNumber(request.body.version)),
  );

  server.get(
    '/services/:name/releases',
    { schema: { params: NameParams, response: { 200: Type.Array(Release), ...errorResponses } } },
    async (request) => listReleases(store, request.params.name),
  );

  server.get(
    '/services/:name/releases/:version',
    { schema: { params: VersionParams, response: { 200: Release, ...errorResponses } } },
    async (request) => {
      const version = Number(request.params.version.replace(/^v/, ''));
      const release = await getRelease(store, request.params.name, version);
      if (!release) throw notFound(`service ${request.params.name} has no release v${version}`);
      return release;
    },
  );

  server.delete(
    '/services/:name/units',
    {
      schema: {
        description: 'Stop every unit of the service and wait until they are gone.',
        params: NameParams,
        response: { 204: Type.Null(), 503: ErrorReply },
      },
    },
    async (request, reply) => {
      const remaining = await scheduler.stopService(request.params.name);
      if (remaining.length > 0) throw unavailable(`units of ${request.params.name} did not stop in time: ${remaining.join(', ')}`);
      return reply.status(204).send(null);
    },
  );

  server.get(
    '/deployments',
    {
      schema: {
        description: 'Deployments, newest first.',
        querystring: Type.Object({ service: Type.Optional(ServiceName) }, { additionalProperties: false }),
        response: { 200: Type.Array(Deployment), ...errorResponses },
      },
    },
    async (request) => listDeployments(store, request.query.service),
  );

  server.get(
    '/deployments/:id',
    { schema: { params: IdParams, response: { 200: Deployment, ...errorResponses } } },
    async (request) => {
      const deployment = await getDeployment(store, request.params.id);
      if (!deployment) throw notFound(`deployment ${request.params.id} does not exist`);
      return deployment;
    },
  );

  server.get(
    '/journal',
    {
      schema: {
        description: 'The journal of events, newest first; page back with `before` (an entry id).',
        querystring: Type.Object(
          {
            limit: Type.Integer({ minimum: 1, maximum: 500, default: 50 }),
            before: Type.Optional(Type.String({ pattern: '^[a-z0-9-]{1,64}$' })),
            service: Type.Optional(ServiceName),
          },
          { additionalProperties: false },
        ),
        response: { 200: Type.Array(JournalEntry), ...errorResponses },
      },
    },
    async (request) => readJournal(store, request.query),
  );
}
