import type { RoleServer } from '../../http/server.js';
import { badRequest, conflict, notFound } from '../../http/errors.js';
import type { Store } from '../../store/store.js';
import { apiRoute } from '../../schemas/api.js';
import { bootstrapToken, issueToken, listTokens, revokeToken, type IssuedToken } from '../../auth/tokens.js';
import { DurationError, parseDuration } from '../../auth/duration.js';

// Token management on the orchestrator, the API people use: create, list and revoke need an admin
// token; bootstrap needs none and works only until the first token exists.

const created = ({ record, secret }: IssuedToken) => {
  const { hash: _hash, ...token } = record;
  return { token, secret };
};

function expiresInMs(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  try {
    return parseDuration(text);
  } catch (error) {
    if (error instanceof DurationError) throw badRequest(`expiresIn: ${error.message}`);
    throw error;
  }
}

export function tokenRoutes(server: RoleServer, store: Store): void {
  server.route({
    ...apiRoute('POST /tokens'),
    handler: async (request, reply) => {
      const { name, role, services, expiresIn } = request.body;
      const ms = expiresInMs(expiresIn);
      const issued = await issueToken(store, { name, role, ...(services === undefined ? {} : { services }), ...(ms === undefined ? {} : { expiresInMs: ms }) });
      if (!issued) throw conflict(`token ${name} already exists`);
      return reply.status(201).send(created(issued));
    },
  });

  server.route({
    ...apiRoute('POST /tokens/bootstrap'),
    handler: async (_request, reply) => {
      const issued = await bootstrapToken(store);
      if (!issued) throw conflict('tokens were already issued: bootstrap works only once; ask an admin for a token (platform token create)');
      return reply.status(201).send(created(issued));
    },
  });

  server.route({ ...apiRoute('GET /tokens'), handler: async () => listTokens(store) });

  server.route({
    ...apiRoute('DELETE /tokens/:name'),
    handler: async (request, reply) => {
      if (!(await revokeToken(store, request.params.name))) throw notFound(`token ${request.params.name} does not exist`);
      return reply.status(204).send(null);
    },
  });
}
