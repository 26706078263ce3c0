import type { RoleServer } from '../../http/server.js';
import { notFound } from '../../http/errors.js';
import type { Store } from '../../store/store.js';
import { apiRoute } from '../../schemas/api.js';
import { listQuotas, removeQuota, saveQuota } from '../../store/records/quotas.js';

// Quotas on the orchestrator: an admin sets and removes them; the directory checks them.

export function quotaRoutes(server: RoleServer, store: Store): void {
  server.route({
    ...apiRoute('PUT /quotas/:services'),
    handler: async (request) => saveQuota(store, request.params.services, request.body),
  });

  server.route({ ...apiRoute('GET /quotas'), handler: async () => listQuotas(store) });

  server.route({
    ...apiRoute('DELETE /quotas/:services'),
    handler: async (request, reply) => {
      if (!(await removeQuota(store, request.params.services))) throw notFound(`no quota for services ${request.params.services}`);
      return reply.status(204).send(null);
    },
  });
}
