import type { RoleServer } from '../../http/server.js';
import { badRequest, conflict, notFound } from '../../http/errors.js';
import type { Store } from '../../store/store.js';
import { apiRoute } from '../../schemas/api.js';
import { EndpointUrlError, MAX_ENDPOINTS, addEndpoint, endpointUrl, listEndpoints, removeEndpoint } from '../../notifications/endpoints.js';
import { destinationRefusal, type RegistryAllowList } from '../../http/registry-policy.js';
import { listDeliveries } from '../../notifications/outbox.js';

// Notification endpoints and their deliveries on the orchestrator, for admins only: an endpoint's
// URL may hold a secret in its path (Slack's do), and the deliveries show those URLs. The signing
// secret is in the reply to the add, and nowhere after.

/** Why an endpoint is refused its destination: the registries' rule (src/http/registry-policy.ts), which deliveries apply again. */
const DESTINATION_RULE = 'endpoints on loopback, private, link-local and other special addresses need --allowed-notification-destination';

export function notificationRoutes(server: RoleServer, store: Store, allowedDestinations: RegistryAllowList): void {
  server.route({
    ...apiRoute('POST /notifications/endpoints'),
    handler: async (request, reply) => {
      let added;
      try {
        const url = new URL(endpointUrl(request.body.url));
        const refusal = await destinationRefusal(url, allowedDestinations);
        // The origin only: the rest of the URL may be a secret.
        if (refusal) throw new EndpointUrlError(`url ${url.origin} is not allowed: ${refusal}; ${DESTINATION_RULE}`);
        added = await addEndpoint(store, request.body);
      } catch (error) {
        if (error instanceof EndpointUrlError) throw badRequest(error.message);
        throw error;
      }
      if (!added) throw conflict(`there are ${MAX_ENDPOINTS} endpoints already; remove one first (platform notify remove)`);
      return reply.status(201).send(added);
    },
  });

  server.route({ ...apiRoute('GET /notifications/endpoints'), handler: async () => listEndpoints(store) });

  server.route({
    ...apiRoute('DELETE /notifications/endpoints/:id'),
    handler: async (request, reply) => {
      if (!(await removeEndpoint(store, request.params.id))) throw notFound(`notification endpoint ${request.params.id} does not exist`);
      return reply.status(204).send(null);
    },
  });

  server.route({
    ...apiRoute('GET /notifications/deliveries'),
    handler: async (request) => listDeliveries(store, { limit: request.query.limit, ...(request.query.state ? { state: request.query.state } : {}) }),
  });
}
