import type { FastifyRequest } from 'fastify';
import { callerRole } from './guard.js';

// A read token sees which environment variables a service has, never their values: they are often
// the service's own secrets. Deploy and admin tokens, and calls that need no token (local under
// --auth auto, --auth none), see the values. Applied where env leaves the platform's API: the
// directory's services and configs, the scheduler's releases, the orchestrator's event stream.

export const REDACTED = '(redacted)';

type Env = Record<string, string>;

export const redactEnv = (env: Env): Env => Object.fromEntries(Object.keys(env).map((name) => [name, REDACTED]));

/** Whether the caller may see environment values. */
export const seesEnvValues = (request: FastifyRequest): boolean => callerRole(request) !== 'read';

/** The config as the caller may see it. */
export const configFor = <C extends { env: Env }>(request: FastifyRequest, config: C): C =>
  seesEnvValues(request) ? config : { ...config, env: redactEnv(config.env) };

/** A record holding a config (a service, a release) as the caller may see it. */
export const withConfigFor = <R extends { config: { env: Env } }>(request: FastifyRequest, record: R): R =>
  seesEnvValues(request) ? record : { ...record, config: configFor(request, record.config) };
