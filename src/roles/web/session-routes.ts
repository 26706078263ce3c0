import type { FastifyRequest } from 'fastify';
import type { RoleServer } from '../../http/server.js';
import { conflict, unauthorized } from '../../http/errors.js';
import { apiRoute } from '../../schemas/api.js';
import type { SessionInfo } from '../../schemas/session.js';
import type { TokenRecord } from '../../schemas/token.js';
import { callerToken, recordFailure, refuseWhileLimited, type AccessControl } from '../../auth/guard.js';
import { isExpired } from '../../auth/access.js';
import { cameOverHttps, presentedSession } from '../../auth/caller.js';
import { sealSession, sessionClaims, sessionCookie, sessionProof, sessionToken, type SessionClaims } from '../../auth/session.js';

// Signing in to the dashboard, on both servers that serve it (the orchestrator and the web role):
// POST /session takes a token and sets the session cookie, GET /session says who the page acts
// as, DELETE /session ends the session (everywhere: a copy of the cookie is refused too) and
// clears the cookie. Sign-ins and sign-outs change no declared state, so they are not journaled.

const shown = ({ name, role, services, expiresAt }: TokenRecord): NonNullable<SessionInfo['token']> => ({
  name,
  role,
  ...(services === undefined ? {} : { services }),
  ...(expiresAt === undefined ? {} : { expiresAt }),
});

export function sessionRoutes(server: RoleServer, access: AccessControl): void {
  const unaudited = <R extends { config: object }>(route: R) => ({ ...route, config: { ...route.config, audit: false as const } });

  server.route({
    ...unaudited(apiRoute('POST /session')),
    handler: async (request, reply) => {
      const { tokens, sessionKey } = access;
      if (!tokens || !sessionKey) throw conflict('access control is off (--auth none): the dashboard needs no sign-in');
      await refuseWhileLimited(access, request, reply);
      const now = Date.now();
      const token = tokens.find(request.body.token);
      if (!token || isExpired(token, now)) {
        return recordFailure(access, request, unauthorized(token ? `token ${token.name} expired at ${token.expiresAt}` : 'the token is unknown or revoked'));
      }
      tokens.recordUse(token, now);
      const claims = sessionClaims(token, now);
      void reply.header('set-cookie', sessionCookie(sealSession(sessionKey, claims), claims.expiresAt - now, cameOverHttps(request)));
      return { via: 'session' as const, token: shown(token), expiresAt: new Date(claims.expiresAt).toISOString(), proof: sessionProof(sessionKey, claims) };
    },
  });

  server.route({ ...unaudited(apiRoute('GET /session')), handler: async (request) => sessionInfo(request, access) });

  server.route({
    ...unaudited(apiRoute('DELETE /session')),
    handler: async (request, reply) => {
      const claims = presentedSession(request.headers, access.sessionKey);
      // Only a session that could still be used needs a record: not one already ended, nor one whose token is gone.
      if (claims && access.endedSessions && stillUsable(claims, access)) await access.endedSessions.end(claims);
      return reply.header('set-cookie', sessionCookie('', 0, cameOverHttps(request))).status(204).send(null);
    },
  });
}

const stillUsable = (claims: SessionClaims, { tokens }: AccessControl): boolean =>
  tokens !== undefined && 'token' in sessionToken(claims, (name) => tokens.named(name), Date.now());

function sessionInfo(request: FastifyRequest, access: AccessControl): SessionInfo {
  const token = callerToken(request);
  if (!token) return { via: 'none' };
  const claims = presentedSession(request.headers, access.sessionKey);
  if (!claims) return { via: 'token', token: shown(token) };
  return { via: 'session', token: shown(token), expiresAt: new Date(claims.expiresAt).toISOString() };
}
