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

const redactConfig = <C extends { env: Env }>(config: C): C => ({ ...config, env: redactEnv(config.env) });
const redactRecord = <R extends { config: { env: Env } }>(record: R): R => ({ ...record, config: redactConfig(record.config) });

/** The config as the caller may see it. */
export const configFor = <C extends { env: Env }>(request: FastifyRequest, config: C): C => (seesEnvValues(request) ? config : redactConfig(config));

/** A record holding a config (a service, a release) as the caller may see it. */
export const withConfigFor = <R extends { config: { env: Env } }>(request: FastifyRequest, record: R): R =>
  seesEnvValues(request) ? record : redactRecord(record);

// The redacted views of records a watched cache holds (the directory's declarations, parsed once
// per version by decodeCached): made on a read token's first read of that version and shared by
// every read after, instead of copying the record and its env on each call. The copies and the
// property-by-property object building were a read token's largest cost per call (bench/auth.ts).
// Keyed weakly by the cached object, so a view goes when its version leaves the cache.
const cachedViews = new WeakMap<object, unknown>();

const cachedView = <T extends object>(value: T, redact: (value: T) => T): T => {
  let view = cachedViews.get(value) as T | undefined;
  if (view === undefined) cachedViews.set(value, (view = redact(value)));
  return view;
};

/** configFor, for a config that a watched cache holds unchanged for as long as its version lasts; callers must not mutate the result. */
export const cachedConfigFor = <C extends { env: Env }>(request: FastifyRequest, config: C): C =>
  seesEnvValues(request) ? config : cachedView(config, redactConfig);

/** withConfigFor, for a record that a watched cache holds unchanged for as long as its version lasts; callers must not mutate the result. */
export const cachedWithConfigFor = <R extends { config: { env: Env } }>(request: FastifyRequest, record: R): R =>
  seesEnvValues(request) ? record : cachedView(record, redactRecord);
