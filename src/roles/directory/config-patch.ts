import { defaultConfig, type ServiceConfig, type ServiceConfigPatch } from '../../schemas/service.js';

/** RFC 7396 merge patch of a service's next config: `env` merges key by key, `null` removes. */
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
  return next;
}
