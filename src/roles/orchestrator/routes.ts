import type { FastifyRequest } from 'fastify';
import type { RoleServer } from '../../http/server.js';
import type { PeerClient } from '../../http/peer-client.js';
import { badRequest, notFound } from '../../http/errors.js';
import type { Store } from '../../store/store.js';
import type { CreatedReply, Service, ServiceConfig } from '../../schemas/service.js';
import { currentTarget, type Deployment, type DeployReply, type Release } from '../../schemas/release.js';
import { parseImageReference, repositoryName } from '../../image-reference.js';
import type { MachineDrain } from '../../schemas/cluster.js';
import { apiRoute } from '../../schemas/api.js';
import { clearDrain, setDrain } from '../../store/records/machine-drains.js';
import { listClusterUnits, listMachines } from './cluster-view.js';
import { readStoreSchema } from '../../store/store-schema.js';
import { listComponentVersions } from '../../store/records/component-versions.js';
import { removeVolumes } from './volume-removal.js';
import { schedulerViewRoutes } from './scheduler-routes.js';
import { jobStdinRoute } from './job-stdin-route.js';

// The facade for people, the CLI and the dashboard: forwards to the directory and the scheduler,
// and reads cluster state (machines, units) from the store. Each route's method, path and schemas
// are its entry in the API table (src/schemas/api.ts).

export interface OrchestratorPeers {
  directory: PeerClient;
  scheduler: PeerClient;
}

export function orchestratorRoutes(server: RoleServer, store: Store, peers: OrchestratorPeers): void {
  // Acting for the caller: peers see the caller's own token (and record its name), not the orchestrator's.
  const directory = (request: FastifyRequest) => peers.directory.actingFor(request);
  const scheduler = (request: FastifyRequest) => peers.scheduler.actingFor(request);
  const path = (name: string, rest = '') => `/services/${encodeURIComponent(name)}${rest}`;

  server.route({
    ...apiRoute('POST /services'),
    handler: async (request, reply) => {
      const { containerRepository, ...rest } = request.body;
      const created = await directory(request).call<CreatedReply>('POST', '/services', { ...rest, containerImage: containerRepository });
      return reply.status(201).send(created.body);
    },
  });

  server.route({ ...apiRoute('GET /services'), handler: async (request) => (await directory(request).call<Service[]>('GET', '/services')).body });

  server.route({
    ...apiRoute('GET /services/:name'),
    handler: async (request) => (await directory(request).call<Service>('GET', path(request.params.name))).body,
  });

  server.route({
    ...apiRoute('DELETE /services/:name'),
    handler: async (request, reply) => {
      await directory(request).call('GET', path(request.params.name));
      await scheduler(request).call('DELETE', path(request.params.name, '/units'), undefined, 90_000);
      // Before the declaration goes, so a machine that fails leaves a call that can be repeated.
      if (request.query.volumes === 'delete') await removeVolumes(store, request, request.params.name);
      await directory(request).call('DELETE', path(request.params.name));
      return reply.status(204).send(null);
    },
  });

  server.route({
    ...apiRoute('GET /services/:name/config/next'),
    handler: async (request) => (await directory(request).call<ServiceConfig>('GET', path(request.params.name, '/config'))).body,
  });

  server.route({
    ...apiRoute('PATCH /services/:name/config/next'),
    handler: async (request) => (await directory(request).call<ServiceConfig>('PATCH', path(request.params.name, '/config'), request.body)).body,
  });

  server.route({
    ...apiRoute('GET /services/:name/config/last'),
    handler: async (request) => {
      const releases = (await scheduler(request).call<Release[]>('GET', path(request.params.name, '/releases'))).body;
      const last = releases.at(-1);
      if (!last) throw notFound(`service ${request.params.name} has not been deployed yet`);
      return last;
    },
  });

  server.route({
    ...apiRoute('GET /services/:name/config/history'),
    handler: async (request) => (await scheduler(request).call<Release[]>('GET', path(request.params.name, '/releases'))).body,
  });

  server.route({
    ...apiRoute('GET /services/:name/config/history/:version'),
    handler: async (request) => (await scheduler(request).call<Release>('GET', path(request.params.name, `/releases/${request.params.version}`))).body,
  });

  /**
   * What a deploy that names no image deploys (`platform deploy NAME`, the dashboard's button):
   * the declaration's tag or digest when it names one, else the tag the service runs now (its
   * newest digest: a tag moved since is picked up), else the digest it runs. Never an implied
   * `:latest`, which a team that tags its releases never pushed.
   */
  async function imageToDeployAgain(request: FastifyRequest, service: Service): Promise<string> {
    const declared = parseImageReference(service.containerImage);
    if (declared.tag !== undefined || declared.digest !== undefined) return service.containerImage;
    const deployments = (await scheduler(request).call<Deployment[]>('GET', `/deployments?service=${encodeURIComponent(service.name)}`)).body;
    const running = currentTarget(deployments);
    if (!running) {
      throw badRequest(
        `containerRepository is needed: ${service.name}'s declared image ${service.containerImage} names no tag and the service runs no release ` +
          `(deploy a tag, e.g. platform deploy ${service.name} --image ${service.containerImage}:v1)`,
      );
    }
    const release = (await scheduler(request).call<Release>('GET', path(service.name, `/releases/${running.release}`))).body;
    const repository = repositoryName(parseImageReference(release.image));
    return release.tag !== undefined ? `${repository}:${release.tag}` : `${repository}@${release.digest}`;
  }

  server.route({
    ...apiRoute('POST /services/:name/deploy'),
    handler: async (request) => {
      const service = (await directory(request).call<Service>('GET', path(request.params.name))).body;
      const containerRepository = request.body?.containerRepository ?? (await imageToDeployAgain(request, service));
      return (await scheduler(request).call<DeployReply>('POST', '/hooks/deploy', { serviceName: service.name, containerRepository, pushedAt: 0 })).body;
    },
  });

  server.route({
    ...apiRoute('GET /services/:name/units'),
    handler: async (request) => {
      await directory(request).call('GET', path(request.params.name));
      return (await listClusterUnits(store)).filter((unit) => unit.service === request.params.name);
    },
  });

  server.route({ ...apiRoute('GET /cluster/units'), handler: async () => listClusterUnits(store) });
  server.route({ ...apiRoute('GET /cluster/machines'), handler: async () => listMachines(store) });
  server.route({
    ...apiRoute('GET /cluster/versions'),
    handler: async () => ({ storeSchema: (await readStoreSchema(store)).version, components: await listComponentVersions(store) }),
  });

  server.route({
    ...apiRoute('PUT /cluster/machines/:id/drain'),
    // The body is optional: a bare PUT drains without a reason.
    preValidation: async (request) => {
      request.body ??= {};
    },
    handler: async (request) => {
      const { id } = request.params;
      const machine = (await listMachines(store)).find((candidate) => candidate.id === id);
      if (!machine) throw notFound(`machine ${id} is not registered`);
      // Draining again keeps the original start and takes the new reason.
      const drain: MachineDrain = { machine: id, since: machine.drain?.since ?? new Date().toISOString(), ...(request.body.reason ? { reason: request.body.reason } : {}) };
      await setDrain(store, drain);
      return drain;
    },
  });

  server.route({
    ...apiRoute('DELETE /cluster/machines/:id/drain'),
    handler: async (request, reply) => {
      await clearDrain(store, request.params.id);
      return reply.status(204).send(null);
    },
  });

  schedulerViewRoutes(server, store, peers.scheduler);
  jobStdinRoute(server, store);
}
