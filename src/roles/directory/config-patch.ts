import { badRequest, describeValidation } from '../../http/errors.js';
import { buildAjv } from '../../http/server.js';
import { validatorOnFirstUse } from '../../http/schema-compilers.js';
import { jobDurationSeconds } from '../../schemas/command.js';
import { scheduleProblem } from '../../schedules/schedule-plan.js';
import { ServiceConfig, defaultConfig, rolloutDefaults, type ServiceConfigPatch } from '../../schemas/service.js';

// A patch is valid on its own, yet merges add up: six patches of 1,000 variables each once built a
// 6,000-variable config. So the merged config is checked against the schema of a declaration's.
// Compiled on the first patch, not at start (issue 29: an idle directory holds no compiled schema).
const validConfig = validatorOnFirstUse(buildAjv(false), ServiceConfig);

/** Keys a patch sets whole or, with null, removes (the default applies). */
const replacedKeys = ['maxSurge', 'maxUnavailable', 'minReadySeconds', 'progressDeadlineSeconds', 'autoRevert', 'stopGraceSeconds', 'healthCheck', 'rollout', 'resources', 'placement', 'volumes', 'volumeMove', 'releaseCommand', 'releaseCommandTimeout', 'schedule', 'timeZone', 'concurrency', 'timeout', 'command'] as const;

/** RFC 7396 merge patch of a service's next config: `env` merges key by key, `null` removes or resets. */
export function applyConfigPatch(config: ServiceConfig, patch: ServiceConfigPatch): ServiceConfig {
  const defaults = defaultConfig();
  const next: ServiceConfig = { ...config, env: { ...config.env } };
  if (patch.numInstances !== undefined) next.numInstances = patch.numInstances ?? defaults.numInstances;
  if (patch.ports !== undefined) next.ports = patch.ports ?? defaults.ports;
  if (patch.env === null) next.env = {};
  else if (patch.env) {
    for (const [name, value] of Object.entries(patch.env)) {
      if (value === null) delete next.env[name];
      else next.env[name] = value;
    }
  }
  for (const key of replacedKeys) {
    const value = patch[key];
    if (value === null) delete next[key];
    else if (value !== undefined) (next as Record<string, unknown>)[key] = value;
  }
  if (!validConfig(next)) {
    throw badRequest(`after this patch the config would break a limit of a declaration: ${describeValidation(validConfig.errors ?? [], 'config')}`);
  }
  assertConsistent(next);
  return next;
}

/** Rules that span fields, which the schema cannot say. */
export function assertConsistent(config: ServiceConfig): void {
  if ((config.maxSurge ?? rolloutDefaults.maxSurge) === 0 && (config.maxUnavailable ?? rolloutDefaults.maxUnavailable) === 0) {
    throw badRequest('maxSurge and maxUnavailable cannot both be 0: a rollout could never replace a unit');
  }
  if (config.releaseCommandTimeout !== undefined && jobDurationSeconds(config.releaseCommandTimeout) === undefined) {
    throw badRequest(`releaseCommandTimeout must be at most 24h, got ${config.releaseCommandTimeout}`);
  }
  assertScheduleConsistent(config);
  const volumes = config.volumes ?? [];
  for (const field of ['name', 'path'] as const) {
    const seen = new Set<string>();
    for (const volume of volumes) {
      if (seen.has(volume[field])) throw badRequest(`volumes: ${field} ${volume[field]} appears twice; each volume needs its own ${field}`);
      seen.add(volume[field]);
    }
  }
}

/** A scheduled job's fields: a schedule that parses in a zone that exists, and no field of it without a schedule. */
function assertScheduleConsistent(config: ServiceConfig): void {
  if (config.timeout !== undefined && jobDurationSeconds(config.timeout) === undefined) throw badRequest(`timeout must be at most 24h, got ${config.timeout}`);
  if (config.schedule === undefined) {
    const orphan = (['timeZone', 'concurrency', 'timeout', 'command'] as const).find((field) => config[field] !== undefined);
    if (orphan) throw badRequest(`${orphan} applies to a scheduled job only: set schedule too (or remove ${orphan})`);
    return;
  }
  const problem = scheduleProblem({ schedule: config.schedule, timeZone: config.timeZone });
  if (problem) throw badRequest(problem);
}
