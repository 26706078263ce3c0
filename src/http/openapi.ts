import type { SwaggerOptions } from '@fastify/swagger';
import { routeAccess } from '../auth/access.js';
import { SESSION_COOKIE } from '../auth/session.js';

// Each role's OpenAPI document (GET /documentation/json), written so the tools operators use
// accept it (Redocly's recommended rules, openapi-typescript): every operation has an operationId
// and a summary made from its method, path and description; the two ways to authenticate are
// declared (a bearer token, the dashboard's session cookie) and every operation says which it
// takes (none for open routes, which also cannot answer 401/403); shared schemas are named after
// their $id instead of def-0.

const securitySchemes = {
  bearerToken: {
    type: 'http',
    scheme: 'bearer',
    description: 'An API token (`platform token create`; docs/access.md "Access tokens"), sent as `Authorization: Bearer plt_…`.',
  },
  sessionCookie: {
    type: 'apiKey',
    in: 'cookie',
    name: SESSION_COOKIE,
    description: 'The dashboard session a sign-in (POST /session at the orchestrator or the web role) sets; changes also need a same-origin Origin header.',
  },
} as const;

const authenticated: Record<string, string[]>[] = [{ bearerToken: [] }, { sessionCookie: [] }];

/** `POST /services/:name/config/next` → `postServicesByNameConfigNext`. */
export function operationIdOf(method: string, url: string): string {
  const words = url
    .split('/')
    .filter(Boolean)
    .map((segment) => (segment.startsWith(':') ? `by-${segment.slice(1)}` : segment))
    .flatMap((segment) => segment.split(/[^a-zA-Z0-9]+/))
    .filter(Boolean);
  return [method.toLowerCase(), ...words.map((word) => word[0]!.toUpperCase() + word.slice(1))].join('');
}

/** The first sentence of the description, or the method and path where there is none. */
export function summaryOf(method: string, url: string, description: string | undefined): string {
  const sentence = description?.match(/^(.+?)[.:](\s|$)/s)?.[1] ?? description;
  const text = sentence?.replace(/\s+/g, ' ').trim();
  if (!text) return `${method} ${url.replace(/:(\w+)/g, '{$1}')}`;
  return text.length > 100 ? `${text.slice(0, 99)}…` : text;
}

interface RouteSchema {
  description?: string;
  summary?: string;
  operationId?: string;
  hide?: boolean;
  response?: Record<string, unknown>;
  [key: string]: unknown;
}

export function openapiOptions(role: string, errorReply: object): SwaggerOptions {
  // The error schema again, with a description of its own (and without its $id, which names one schema).
  const { $id: _id, ...error } = errorReply as { $id?: string };
  return {
    openapi: {
      info: {
        title: `platform ${role} API`,
        version: '1',
        description: `The ${role} role of platform, a self-hosted container platform.`,
        license: { name: 'MIT', url: 'https://opensource.org/license/mit' },
      },
      // Relative: the document is served by the role it describes, at whatever address it is reached.
      servers: [{ url: '/', description: `this ${role}` }],
      components: { securitySchemes },
      security: authenticated,
    },
    refResolver: {
      buildLocalReference: (json, _baseUri, _fragment, i) => (typeof json.$id === 'string' ? json.$id : `Schema${i}`),
    },
    transform: ({ schema, url, route }) => {
      const given = (schema ?? {}) as RouteSchema;
      if (given.hide) return { schema: given as never, url };
      const method = Array.isArray(route.method) ? route.method[0]! : route.method;
      const open = routeAccess(method, route.config as never).access === 'open';
      const response = { ...(given.response ?? {}) };
      if (!open) {
        response[401] ??= { ...error, description: 'No valid token or session (under --auth token, or a call that is not local under --auth auto).' };
        response[403] ??= { ...error, description: 'The token may not do this.' };
      }
      return {
        url,
        schema: {
          ...given,
          operationId: given.operationId ?? operationIdOf(method, url),
          summary: given.summary ?? summaryOf(method, url, given.description),
          ...(given.response || !open ? { response } : {}),
          ...(open ? { security: [] } : {}),
        } as never,
      };
    },
  };
}
