import type { RoleServer } from '../../http/server.js';
import type { PeerClient } from '../../http/peer-client.js';
import { request as undiciRequest } from '../../http/undici-request.js';
import { HttpError, notFound, unavailable } from '../../http/errors.js';
import type { Store } from '../../store/store.js';
import { readMachine } from '../../store/records/machines.js';
import type { Deployment, DeployReply, JournalEntry } from '../../schemas/release.js';
import { apiRoute } from '../../schemas/api.js';
import type { ServiceTags } from '../../schemas/registry.js';
import { queryString } from '../../schemas/route-key.js';
import { listClusterUnits } from './cluster-view.js';
import { previousOutputText } from './previous-output.js';
import { passedOnAuthorization } from '../../auth/caller.js';
import { MAX_LOG_TAILS, StreamLimit } from '../../http/stream-limit.js';
import { followedWhileCredentialsLast } from '../../auth/credential-lifetime.js';
import type { JobView } from '../../schemas/job.js';
import { jobOutput } from './job-output.js';

// The orchestrator's view of deployments, the journal, rollbacks, a service's tags and unit logs: forwarded to the
// scheduler, or to the agent of the machine a unit runs on.

export function schedulerViewRoutes(server: RoleServer, store: Store, scheduler: PeerClient): void {
  server.route({
    ...apiRoute('GET /deployments'),
    handler: async (request) => (await scheduler.actingFor(request).call<Deployment[]>('GET', `/deployments${queryString(request.query)}`)).body,
  });

  server.route({
    ...apiRoute('GET /deployments/:id'),
    handler: async (request) => (await scheduler.actingFor(request).call<Deployment>('GET', `/deployments/${request.params.id}`)).body,
  });

  server.route({
    ...apiRoute('GET /journal'),
    handler: async (request) => (await scheduler.actingFor(request).call<JournalEntry[]>('GET', `/journal${queryString(request.query)}`)).body,
  });

  server.route({
    ...apiRoute('POST /services/:name/rollback'),
    handler: async (request) => (await scheduler.actingFor(request).call<DeployReply>('POST', `/services/${request.params.name}/rollback`, request.body)).body,
  });

  server.route({
    ...apiRoute('GET /services/:name/tags'),
    handler: async (request) => (await scheduler.actingFor(request).call<ServiceTags>('GET', `/services/${request.params.name}/tags`)).body,
  });

  server.route({
    ...apiRoute('POST /services/:name/jobs'),
    handler: async (request, reply) => reply.status(201).send((await scheduler.actingFor(request).call<JobView>('POST', `/services/${request.params.name}/jobs`, request.body)).body),
  });

  server.route({
    ...apiRoute('GET /jobs'),
    handler: async (request) => (await scheduler.actingFor(request).call<JobView[]>('GET', `/jobs${queryString(request.query)}`)).body,
  });

  server.route({
    ...apiRoute('GET /services/:name/jobs/:id'),
    handler: async (request) => (await scheduler.actingFor(request).call<JobView>('GET', `/services/${request.params.name}/jobs/${request.params.id}`)).body,
  });

  server.route({
    ...apiRoute('DELETE /services/:name/jobs/:id'),
    handler: async (request) => (await scheduler.actingFor(request).call<JobView>('DELETE', `/services/${request.params.name}/jobs/${request.params.id}`)).body,
  });

  const tails = new StreamLimit('followed log tails', MAX_LOG_TAILS);
  server.route({
    ...apiRoute('GET /services/:name/jobs/:id/output'),
    handler: async (request, reply) => {
      const { name, id } = request.params;
      if (request.query.follow) tails.admit(reply);
      const text = await jobOutput(store, name, id, request.query.tail, request.query.follow, () => reply.raw.flushHeaders());
      reply.raw.once('close', () => text.destroy());
      return reply.type('text/plain; charset=utf-8').send(request.query.follow ? followedWhileCredentialsLast(request, reply, text) : text);
    },
  });

  server.route({
    ...apiRoute('GET /services/:name/units/:unit/logs'),
    handler: async (request, reply) => {
      const { name, unit } = request.params;
      if (request.query.previous) {
        const text = await previousOutputText(store, name, unit, request.query.tail, request.query.follow);
        return reply.type('text/plain; charset=utf-8').send(text);
      }
      if (request.query.follow) tails.admit(reply);
      const found = (await listClusterUnits(store)).find((u) => u.service === name && u.unit === unit);
      if (!found) throw notFound(`service ${name} has no unit ${unit}`);
      const machine = await readMachine(store, found.machine);
      if (!machine) throw unavailable(`machine ${found.machine} of ${unit} is not registered (its agent is down)`);
      const url = `http://${machine.record.address}/units/${unit}/logs${queryString({ tail: request.query.tail, follow: request.query.follow })}`;
      let response;
      try {
        // The agent checks the caller's token or session as every role does: pass it on.
        const authorization = passedOnAuthorization(request.headers);
        response = await undiciRequest(url, { headersTimeout: 10_000, bodyTimeout: 0, headers: authorization === undefined ? {} : { authorization } });
      } catch (error) {
        throw unavailable(`agent of machine ${found.machine} at ${machine.record.address} is not answering: ${(error as Error).message}`);
      }
      if (response.statusCode !== 200) {
        const body = (await response.body.json().catch(() => ({}))) as { message?: string };
        throw new HttpError(response.statusCode >= 500 ? 502 : response.statusCode, body.message ?? `agent answered ${response.statusCode}`);
      }
      reply.raw.once('close', () => response.body.destroy());
      const text = request.query.follow ? followedWhileCredentialsLast(request, reply, response.body) : response.body;
      return reply.type('text/plain; charset=utf-8').send(text);
    },
  });
}
