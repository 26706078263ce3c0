import type { FastifyRequest } from 'fastify';
import { decide } from './access.js';
import { callerToken } from './guard.js';

// Environment values are often the service's own secrets, so they go only to callers who could
// deploy the service anyway: admin tokens, deploy tokens whose scope (services glob) covers it,
// and calls that need no token (local under --auth auto, --auth none). Everyone else (read
// tokens, deploy tokens scoped to other services) sees the names with the values redacted.
// Applied where env leaves the platform's API: the directory's services and configs, the
// scheduler's releases, the orchestrator's event stream.

export const REDACTED = '(redacted)';

type Env = Record<string, string>;

export const redactEnv = (env: Env): Env => Object.fromEntries(Object.keys(env).map((name) => [name, REDACTED]));

/** Whether the caller may see the env values of `service`: whether it may deploy it. */
export function seesEnvValues(request: FastifyRequest, service: string): boolean {
  const token = callerToken(request);
  return token === undefined || decide(token, 'deploy', service).allowed;
}

/** For a stream serving many services: whose env values the caller sees, or undefined when it sees every service's. */
export function envValuesSeenBy(request: FastifyRequest): ((service: string) => boolean) | undefined {
  const token = callerToken(request);
  if (token === undefined || token.role === 'admin' || (token.role === 'deploy' && token.services === undefined)) return undefined;
  return (service) => decide(token, 'deploy', service).allowed;
}

const redactConfig = <C extends { env: Env }>(config: C): C => ({ ...config, env: redactEnv(config.env) });
/** A record holding a config (a service, a release) with its env values redacted. */
export const redactRecord = <R extends { config: { env: Env } }>(record: R): R => ({ ...record, config: redactConfig(record.config) });

/** The config of `service` as the caller may see it. */
export const configFor = <C extends { env: Env }>(request: FastifyRequest, service: string, config: C): C =>
  seesEnvValues(request, service) ? config : redactConfig(config);

/** A record of `service` holding a config (the service, a release) as the caller may see it. */
export const withConfigFor = <R extends { config: { env: Env } }>(request: FastifyRequest, service: string, record: R): R =>
  seesEnvValues(request, service) ? record : redactRecord(record);

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
export const cachedConfigFor = <C extends { env: Env }>(request: FastifyRequest, service: string, config: C): C =>
  seesEnvValues(request, service) ? config : cachedView(config, redactConfig);

/** withConfigFor, for a record that a watched cache holds unchanged for as long as its version lasts; callers must not mutate the result. */
export const cachedWithConfigFor = <R extends { config: { env: Env } }>(request: FastifyRequest, service: string, record: R): R =>
  seesEnvValues(request, service) ? record : cachedView(record, redactRecord);
