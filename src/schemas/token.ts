import { Type, type Static } from '@sinclair/typebox';
import { DNS_LABEL, ErrorReply, ServiceName, errorResponses } from './common.js';

// API tokens (docs/access.md "Access tokens"). The secret is shown once, when the token is created;
// the store and every listing hold only its hash, or nothing of it.

export const TokenRole = Type.Union([Type.Literal('read'), Type.Literal('deploy'), Type.Literal('admin')], {
  description: '"read" (every GET, events, logs), "deploy" (read, plus deploy, rollback, scale and next config of its services) or "admin" (everything)',
});
export type TokenRole = Static<typeof TokenRole>;

export const TokenName = Type.String({ pattern: DNS_LABEL, description: ServiceName.description, examples: ['ci'] });

export const ServiceGlob = Type.String({
  pattern: '^[a-z0-9*-]{1,63}$',
  description: 'a glob over service names of 1 to 63 characters: lowercase letters, digits, "-" and "*" wildcards',
  examples: ['web-*'],
});

export const Duration = Type.String({
  pattern: '^([0-9]{1,6}[smhdw])+$',
  description: 'a duration such as 90d, 12h or 1w2d (s, m, h, d, w)',
  examples: ['90d'],
});

/** A token as listed: never the secret. */
export const Token = Type.Object(
  {
    name: TokenName,
    role: TokenRole,
    services: Type.Optional(ServiceGlob),
    createdAt: Type.String({ format: 'date-time' }),
    expiresAt: Type.Optional(Type.String({ format: 'date-time' })),
    lastUsedAt: Type.Optional(Type.String({ format: 'date-time' })),
  },
  { $id: 'Token' },
);
export type Token = Static<typeof Token>;

/** What the store holds: the token without its last use, and the hex SHA-256 of its secret. */
export type TokenRecord = Omit<Token, 'lastUsedAt'> & { hash: string };

export const TokenCreate = Type.Object(
  {
    name: TokenName,
    role: TokenRole,
    services: Type.Optional(ServiceGlob),
    expiresIn: Type.Optional(Duration),
  },
  { additionalProperties: false },
);
export type TokenCreate = Static<typeof TokenCreate>;

export const TokenCreated = Type.Object({
  token: Token,
  secret: Type.String({ description: 'plt_ and 43 URL-safe characters; shown this once, never stored' }),
});
export type TokenCreated = Static<typeof TokenCreated>;

export const TokenParams = Type.Object({ name: TokenName });

export const createTokenSchema = {
  description: 'Create a token (admin). The reply carries its secret, shown this once.',
  body: TokenCreate,
  response: { 201: TokenCreated, 401: ErrorReply, 403: ErrorReply, ...errorResponses },
};

export const bootstrapTokenSchema = {
  description: 'Create the first admin token, named "bootstrap". Works only while no token was ever issued (409 after).',
  response: { 201: TokenCreated, ...errorResponses },
};

export const listTokensSchema = {
  description: 'Every token: names, roles, scopes, dates (admin). Never a secret.',
  response: { 200: Type.Array(Token), 401: ErrorReply, 403: ErrorReply, ...errorResponses },
};

export const revokeTokenSchema = {
  description: 'Revoke a token (admin): every role refuses it within a second.',
  params: TokenParams,
  response: { 204: Type.Null(), 401: ErrorReply, 403: ErrorReply, ...errorResponses },
};
