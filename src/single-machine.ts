import type { PlatformConfig } from './config.js';

// `platform up` is the single-machine mode: every role in one process, for one operator on one
// machine. Two defaults of a cluster would stop its first deploy there (issue 31), so it settles
// them for this machine before the roles start, and says so, one line each:
// - a registry on this machine is allowed without --allowed-registry. The registry policy refuses
//   loopback registries unless named because on a cluster anyone who may declare a service could
//   make the scheduler call the machine's own services; on one machine that person is its operator.
// - an engine with no bridge network cannot publish a bridge-mode unit's port (the deploy waited
//   120 s "for Docker to publish the unit port", then failed), so units use host networking.
// An explicit --network is the operator's choice and kept.

/** The registry hosts a `platform up` deploy may use with no --allowed-registry: this machine's. */
export const thisMachineRegistries = ['127.0.0.1', 'localhost', '::1'];

/** What `platform up` found of the Docker engine before its roles start. */
export interface EngineFacts {
  /** The engine's address, as messages name it. */
  dockerHost: string;
  /** Whether it has a `bridge` network; undefined when it did not answer. */
  hasBridge: boolean | undefined;
}

export interface SingleMachineSettings {
  config: PlatformConfig;
  /** One line for each default settled, printed at start. */
  notices: string[];
}

export function singleMachineSettings(config: PlatformConfig, networkChosen: boolean, engine: EngineFacts): SingleMachineSettings {
  const notices = [`registries on this machine (${thisMachineRegistries.join(', ')}) are allowed without --allowed-registry`];
  const allowedRegistries = [...new Set([...config.scheduler.allowedRegistries, ...thisMachineRegistries])];
  const useHostNetwork = config.roles.includes('agent') && !networkChosen && engine.hasBridge === false;
  if (useHostNetwork) notices.push(`the Docker engine at ${engine.dockerHost} has no bridge network: units use host networking (--network host)`);
  return {
    config: {
      ...config,
      scheduler: { ...config.scheduler, allowedRegistries },
      agent: useHostNetwork ? { ...config.agent, network: 'host' } : config.agent,
    },
    notices,
  };
}
