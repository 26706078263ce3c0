import { Type } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';
import type { RoleServer } from '../../http/server.js';
import type { PeerClient } from '../../http/peer-client.js';
import { notFound } from '../../http/errors.js';
import type { Store } from '../../store/store.js';
import { ErrorReply, NameParams, errorResponses } from '../../schemas/common.js';
import { CreatedReply, OrchestratorServiceCreate, Service, ServiceConfig, ServiceConfigPatch } from '../../schemas/service.js';
import { DeployReply, ManualDeployRequest, Release, VersionParams } from '../../schemas/release.js';
import { Machine, MachineDrain, MachineDrainRequest, MachineParams } from '../../schemas/cluster.js';
import { machineDrainKey } from '../../store/keys.js';
import { ClusterUnit, listClusterUnits, listMachines } from './cluster-view.js';
import { schedulerViewRoutes } from './scheduler-routes.js';

// The facade for people, the CLI and the dashboard: forwards to the directory and the scheduler,
// and reads cluster state (machines, units) from the store.

export interface OrchestratorPeers {
  directory: PeerClient;
  scheduler: PeerClient;
}

export function orchestratorRoutes(server: RoleServer, store: Store, peers: OrchestratorPeers): void {
  const directory = (request: FastifyRequest) => peers.directory.actingFor(request);
  const scheduler = (request: FastifyRequest) => peers.scheduler.actingFor(request);
  const deployRight = { access: 'deploy', service: { param: 'name' } } as const;
  const path = (name: string, rest = '') => `/services/${encodeURIComponent(name)}${rest}`;

  server.post(
    '/services',
    { schema: { description: 'Declare a service (orchestrator form).', body: OrchestratorServiceCreate, response: { 201: CreatedReply, ...errorResponses } } },
    async (request, reply) => {
      const { containerRepository, ...rest } = request.body;
      const created = await directory(request).call<CreatedReply>('POST', '/services', { ...rest, containerImage: containerRepository });
      return reply.status(201).send(created.body);
    },
  );

  server.get('/services', { schema: { response: { 200: Type.Array(Service), ...errorResponses } } }, async (request) =>
    (await directory(request).call<Service[]>('GET', '/services')).body,
  );

  server.get('/services/:name', { schema: { params: NameParams, response: { 200: Service, ...errorResponses } } }, async (request) =>
    (await directory(request).call<Service>('GET', path(request.params.name))).body,
  );

  server.delete(
    '/services/:name',
    { schema: { description: 'Stop the units of the service, then delete its declaration.', params: NameParams, response: { 204: Type.Null(), ...errorResponses } } },
    async (request, reply) => {
      await directory(request).call('GET', path(request.params.name));
      await scheduler(request).call('DELETE', path(request.params.name, '/units'), undefined, 90_000);
      await directory(request).call('DELETE', path(request.params.name));
      return reply.status(204).send(null);
    },
  );

  server.get('/services/:name/config/next', { schema: { params: NameParams, response: { 200: ServiceConfig, ...errorResponses } } }, async (request) =>
    (await directory(request).call<ServiceConfig>('GET', path(request.params.name, '/config'))).body,
  );

  server.patch(
    '/services/:name/config/next',
    {
      schema: {
        description: 'Change the next config (JSON merge patch: env keys set, null removes). Takes effect at the next deploy.',
        params: NameParams,
        body: ServiceConfigPatch,
        response: { 200: ServiceConfig, ...errorResponses },
      },
      config: deployRight,
    },
    async (request) => (await directory(request).call<ServiceConfig>('PATCH', path(request.params.name, '/config'), request.body)).body,
  );

  server.get('/services/:name/config/last', { schema: { description: 'The config of the latest release.', params: NameParams, response: { 200: Release, ...errorResponses } } }, async (request) => {
    const releases = (await scheduler(request).call<Release[]>('GET', path(request.params.name, '/releases'))).body;
    const last = releases.at(-1);
    if (!last) throw notFound(`service ${request.params.name} has not been deployed yet`);
    return last;
  });

  server.get('/services/:name/config/history', { schema: { description: 'Every release, oldest first.', params: NameParams, response: { 200: Type.Array(Release), ...errorResponses } } }, async (request) =>
    (await scheduler(request).call<Release[]>('GET', path(request.params.name, '/releases'))).body,
  );

  server.get('/services/:name/config/history/:version', { schema: { params: VersionParams, response: { 200: Release, ...errorResponses } } }, async (request) =>
    (await scheduler(request).call<Release>('GET', path(request.params.name, `/releases/${request.params.version}`))).body,
  );

  server.post(
    '/services/:name/deploy',
    {
      schema: {
        description: "Deploy the service's image (or the given reference of the same repository) with its next config.",
        params: NameParams,
        body: Type.Optional(ManualDeployRequest),
        response: { 200: DeployReply, ...errorResponses },
      },
      config: deployRight,
    },
    async (request) => {
      const service = (await directory(request).call<Service>('GET', path(request.params.name))).body;
      const containerRepository = request.body?.containerRepository ?? service.containerImage;
      return (await scheduler(request).call<DeployReply>('POST', '/hooks/deploy', { serviceName: service.name, containerRepository, pushedAt: 0 })).body;
    },
  );

  server.get('/services/:name/units', { schema: { params: NameParams, response: { 200: Type.Array(ClusterUnit), ...errorResponses } } }, async (request) => {
    await directory(request).call('GET', path(request.params.name));
    return (await listClusterUnits(store)).filter((unit) => unit.service === request.params.name);
  });

  server.get('/cluster/units', { schema: { response: { 200: Type.Array(ClusterUnit), 503: ErrorReply } } }, async () => listClusterUnits(store));
  server.get('/cluster/machines', { schema: { response: { 200: Type.Array(Machine), 503: ErrorReply } } }, async () => listMachines(store));

  server.put(
    '/cluster/machines/:id/drain',
    {
      schema: {
        description: 'Drain a machine: no new unit is placed on it, and each of its units moves to another machine (the replacement runs before the unit is drained and stopped).',
        params: MachineParams,
        body: MachineDrainRequest,
        response: { 200: MachineDrain, ...errorResponses },
      },
      // The body is optional: a bare PUT drains without a reason.
      preValidation: async (request) => {
        request.body ??= {};
      },
    },
    async (request) => {
      const { id } = request.params;
      const machine = (await listMachines(store)).find((candidate) => candidate.id === id);
      if (!machine) throw notFound(`machine ${id} is not registered`);
      // Draining again keeps the original start and takes the new reason.
      const drain: MachineDrain = { machine: id, since: machine.drain?.since ?? new Date().toISOString(), ...(request.body.reason ? { reason: request.body.reason } : {}) };
      await store.put(machineDrainKey(id), JSON.stringify(drain));
      return drain;
    },
  );

  server.delete(
    '/cluster/machines/:id/drain',
    {
      schema: {
        description: 'Stop draining a machine: new units may be placed on it again (units that moved away stay where they are).',
        params: MachineParams,
        response: { 204: Type.Null(), ...errorResponses },
      },
    },
    async (request, reply) => {
      await store.delete(machineDrainKey(request.params.id));
      return reply.status(204).send(null);
    },
  );

  schedulerViewRoutes(server, store, peers.scheduler);
}
