import type { FastifyBaseLogger } from 'fastify';
import type { RoleServer } from '../../http/server.js';
import { HttpError, badRequest, conflict, notFound } from '../../http/errors.js';
import { isFromThisMachine } from '../../auth/caller.js';
import type { AuthMode } from '../../auth/guard.js';
import type { Store } from '../../store/store.js';
import { apiRoute } from '../../schemas/api.js';
import { bootstrapToken, issueToken, listTokens, revokeToken, tokensWereIssued, type IssuedToken } from '../../auth/tokens.js';
import { DurationError, parseDuration } from '../../auth/duration.js';

// Token management on the orchestrator, the API people use: create, list and revoke need an admin
// token; bootstrap needs none and works only until the first token exists, and only for a caller
// on this machine (not a unit): whoever reaches it first becomes admin, so another machine must
// not race the operator for it. A remote operator runs `platform token bootstrap` on the machine.

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
    handler: async (request, reply) => {
      if (!(await isFromThisMachine(request))) {
        throw new HttpError(403, 'POST /tokens/bootstrap is accepted only from this machine: run `platform token bootstrap` on the orchestrator\'s machine');
      }
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

/** Until a first token exists only this machine's own calls get in: the operator is told so, and how to make one. */
export async function warnWhileNoToken(store: Store, mode: AuthMode, log: FastifyBaseLogger): Promise<void> {
  if (mode === 'none' || (await tokensWereIssued(store))) return;
  const local = mode === 'auto' ? ' (this machine\'s own calls on a loopback listener need none)' : '';
  log.warn(`no API token exists yet: every call from elsewhere is refused${local}; make the first admin token on this machine with \`platform token bootstrap\``);
}
