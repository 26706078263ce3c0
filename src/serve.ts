import { resolveConfig, type PlatformConfig, type RawFlags } from './config.js';
import { launchRoles } from './roles/launch.js';
import type { StopReason } from './roles/role.js';
import { bootstrapIntoFile } from './auth/first-token.js';
import { createLogger, logProcessWarnings } from './logger.js';
import { singleMachineSettings, type SingleMachineSettings } from './single-machine.js';

// `platform serve` and `platform up`: the roles in this process. The CLI loads this module only for
// those two commands, so a client command starts without the servers' dependencies (issue 31).

type Launched = Awaited<ReturnType<typeof launchRoles>>;

export async function serve(flags: RawFlags, up: boolean): Promise<void> {
  const resolved = resolveConfig(flags);
  const { config, notices } = up ? await settleSingleMachine(resolved, flags) : { config: resolved, notices: [] };
  const log = createLogger(config);
  logProcessWarnings(log);
  // Installed before the roles start (their start may take long: a store to reach, an HAProxy to
  // adopt): a signal meanwhile stops the platform once it has started, rather than killing it
  // half-started. SIGTERM is a restart (systemd's RestartKillSignal, a supervisor, an upgrade): the
  // gateway leaves HAProxy serving for the next process to adopt. SIGINT (Ctrl-C, systemd's stop)
  // stops it too.
  // A start still waiting for etcd (src/roles/launch.ts) has nothing to stop: the signal ends the wait.
  const started: { platform?: Launched } = {};
  const waitingForStore = new AbortController();
  let stopAs: StopReason | undefined;
  const closeAndExit = (running: Launched, reason: StopReason) => void running.close(reason).then(() => process.exit(0));
  const stop = (signal: 'SIGTERM' | 'SIGINT') => {
    if (stopAs) return;
    stopAs = signal === 'SIGTERM' ? 'restart' : 'stop';
    log.info({ signal }, 'shutting down');
    if (started.platform) closeAndExit(started.platform, stopAs);
    else waitingForStore.abort(new Error(`stopped by ${signal}`));
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  const platform = await launchRoles(config, { logger: log, signal: waitingForStore.signal }).catch((error: unknown) => {
    if (!waitingForStore.signal.aborted) throw error;
    log.info('stopped before the roles started (etcd did not answer yet)');
    process.exit(0);
  });
  started.platform = platform;
  if (stopAs) return closeAndExit(platform, stopAs);
  if (up) {
    const store = config.etcd ? `etcd ${config.etcd.join(',')}` : `embedded store in ${config.dataDir}`;
    process.stdout.write(`platform is up (${store}, units reached under *.${config.domain})\n`);
    for (const { role, url } of platform.roles) process.stdout.write(`  ${role.padEnd(13)} ${url}   (API docs: ${url}/documentation)\n`);
    for (const notice of notices) process.stdout.write(`${notice}\n`);
    if (config.auth !== 'none') {
      const tokenFile = await bootstrapIntoFile(platform.store, config.dataDir);
      if (tokenFile) process.stdout.write(`first admin token written to ${tokenFile} (only you can read it): PLATFORM_TOKEN=$(cat ${tokenFile})\n`);
    }
    await warnWithoutEngine(config);
    const dashboard = platform.roles.find((running) => running.role === 'web') ?? platform.roles.find((running) => running.role === 'orchestrator');
    if (dashboard) process.stdout.write(`dashboard: ${dashboard.url}/\n`);
  }
}

/** `platform up`'s single-machine defaults (single-machine.ts), from what the local engine says. */
async function settleSingleMachine(config: PlatformConfig, flags: RawFlags): Promise<SingleMachineSettings> {
  const { connectDocker, describeDockerHost, hasBridgeNetwork } = await import('./roles/agent/docker-client.js');
  const dockerHost = config.agent.dockerHost;
  const hasBridge = config.roles.includes('agent') ? await hasBridgeNetwork(connectDocker(dockerHost)) : undefined;
  return singleMachineSettings(config, flags.network !== undefined, { dockerHost: describeDockerHost(dockerHost), hasBridge });
}

/** `platform up` says at once when no Docker engine answers: the first deploy would fail otherwise, with no hint why. */
async function warnWithoutEngine(config: PlatformConfig): Promise<void> {
  if (!config.roles.includes('agent')) return;
  // Loaded here, not at the top: dockerode (and the SSH client it loads, with a 16 MiB buffer of
  // its own) would otherwise sit in every process, a directory's and a CLI call's included.
  const { checkEngine, connectDocker, engineUnreachableAdvice } = await import('./roles/agent/docker-client.js');
  const engine = await checkEngine(connectDocker(config.agent.dockerHost));
  if (!engine.reachable) process.stderr.write(`warning: ${engineUnreachableAdvice(config.agent.dockerHost, engine.error ?? 'no reason given')}\n`);
}
