import type { RoleServer } from '../../http/server.js';
import { badRequest, notFound } from '../../http/errors.js';
import type { Store } from '../../store/store.js';
import { apiRoute } from '../../schemas/api.js';
import { parseImageReference } from '../../image-reference.js';
import { listRegistryLogins, removeRegistryLogin, saveRegistryLogin } from '../../auth/registry-credentials.js';

// Registry logins on the orchestrator (admin only, as every change and the listing are): the
// password arrives in the login's body and is never answered, listed or journaled.

/**
 * The host as image references name it, so a login matches the deploys that use it: Docker Hub's
 * aliases are docker.io, and a bare word (`myhost`) would be read as a Docker Hub repository.
 */
function registryOf(host: string): string {
  const registry = parseImageReference(`${host}/image`).registry;
  if (registry !== host && registry === 'docker.io' && !host.endsWith('docker.io')) {
    throw badRequest(`host: ${host} is not read as a registry in image references; a registry host has a "." or a port, or is localhost`);
  }
  return registry;
}

export function registryRoutes(server: RoleServer, store: Store): void {
  server.route({
    ...apiRoute('PUT /registries/:host'),
    handler: async (request) => saveRegistryLogin(store, registryOf(request.params.host), request.body),
  });

  server.route({ ...apiRoute('GET /registries'), handler: async () => listRegistryLogins(store) });

  server.route({
    ...apiRoute('DELETE /registries/:host'),
    handler: async (request, reply) => {
      const host = registryOf(request.params.host);
      if (!(await removeRegistryLogin(store, host))) throw notFound(`no login for registry ${host}`);
      return reply.status(204).send(null);
    },
  });
}
