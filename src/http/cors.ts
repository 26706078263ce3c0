import type { FastifyInstance } from 'fastify';
import { SESSION_PROOF_HEADER } from '../auth/session.js';
import type { RequestRule } from './request-rules.js';

// Cross-origin calls from browsers: none by default, so no other site's page can read this API's
// replies. `--cors-origin` names the origins whose pages may, with the caller's session; the CSRF
// rule (src/auth/csrf.ts) accepts their changes too.

const ALLOWED_METHODS = 'GET, POST, PUT, PATCH, DELETE';
const ALLOWED_HEADERS = `authorization, content-type, last-event-id, ${SESSION_PROOF_HEADER}`;

/** The CORS headers of each reply (a rule no call breaks); none without --cors-origin. */
export const corsRequestRules = (origins: readonly string[]): RequestRule[] =>
  origins.length === 0
    ? []
    : [
        (request, reply) => {
          const origin = request.headers.origin;
          void reply.header('vary', 'Origin');
          if (origin !== undefined && origins.includes(origin)) {
            void reply.headers({ 'access-control-allow-origin': origin, 'access-control-allow-credentials': 'true' });
          }
          return undefined;
        },
      ];

/** The preflight route, with --cors-origin. */
export function installCorsPreflight(server: FastifyInstance, origins: readonly string[]): void {
  if (origins.length === 0) return;
  // The preflight a browser sends before a call with a JSON body or an Authorization header.
  server.options('/*', { schema: { hide: true }, config: { access: 'open' } }, async (_request, reply) =>
    reply
      .headers({ 'access-control-allow-methods': ALLOWED_METHODS, 'access-control-allow-headers': ALLOWED_HEADERS, 'access-control-max-age': '600' })
      .status(204)
      .send(),
  );
}
