import { Type, type Static } from '@sinclair/typebox';
import { ErrorReply, NameParams, errorResponses } from './common.js';

// Private registry logins (docs/deploys.md "Private registries"). The password goes in once, with the
// login, and no reply, listing or journal line ever carries it.

/** What an image reference names as its registry: a DNS name or an IPv4 or [IPv6] address, and an optional port. */
export const RegistryHost = Type.String({
  pattern: '^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*|\\[[0-9a-f:.]{2,45}\\])(:[0-9]{1,5})?$',
  maxLength: 253,
  description: 'a registry host as image references name it: host or host:port, in lowercase (e.g. registry.example:5000)',
  examples: ['registry.example:5000'],
});

export const RegistryParams = Type.Object({ host: RegistryHost });

export const RegistryLoginRequest = Type.Object(
  {
    // Basic authentication joins user and password with a colon: a colon in the user would move it.
    username: Type.String({ pattern: '^[\\x21-\\x39\\x3b-\\x7e]{1,255}$', description: '1-255 printable characters without spaces or ":"' }),
    password: Type.String({ minLength: 1, maxLength: 4096, description: '1-4096 characters' }),
  },
  { additionalProperties: false },
);
export type RegistryLoginRequest = Static<typeof RegistryLoginRequest>;

/** A login as listed: never the password. */
export const RegistryLogin = Type.Object(
  {
    host: RegistryHost,
    username: Type.String(),
    addedAt: Type.String({ format: 'date-time' }),
  },
  { $id: 'RegistryLogin' },
);
export type RegistryLogin = Static<typeof RegistryLogin>;

export const registryLoginSchema = {
  description: 'Store the user name and password deploys use for this registry (admin): the scheduler resolves tags and agents pull with them. Replaces an earlier login of the host.',
  params: RegistryParams,
  body: RegistryLoginRequest,
  response: { 200: RegistryLogin, ...errorResponses },
};

export const listRegistryLoginsSchema = {
  description: 'Every registry login: host, user name and when it was added (admin). Never a password.',
  response: { 200: Type.Array(RegistryLogin), ...errorResponses },
};

export const registryLogoutSchema = {
  description: 'Forget the login of a registry (admin): later deploys reach it without credentials.',
  params: RegistryParams,
  response: { 204: Type.Null(), ...errorResponses },
};

/** The tags of a service's repository, for the dashboard's Deploy picker. */
export const ServiceTags = Type.Object({
  /** `registry/repository`, as a deploy names it before `:<tag>`. */
  repository: Type.String(),
  tags: Type.Array(Type.String()),
});
export type ServiceTags = Static<typeof ServiceTags>;

export const serviceTagsSchema = {
  description:
    "The tags of the service's repository, as its registry lists them, newest version first (the scheduler asks, with the registry's stored login: no credential reaches the caller). " +
    '400 when the registry is not allowed or refuses the login, 502 when it fails.',
  params: NameParams,
  response: { 200: ServiceTags, ...errorResponses, 502: ErrorReply },
};
