import { pino } from 'pino';
import { ConfigError, resolveEtcd, type EtcdFlags } from './config.js';
import { openStore } from './store/open-store.js';
import { components, type Component } from './store/keys.js';
import { AnnounceSidekick } from './announce-sidekick.js';
import { logProcessWarnings } from './logger.js';

export type AnnounceFlags = EtcdFlags & { role: string; address: string; announceTtl?: string; checkInterval?: string };

/**
 * `platform announce`: keeps `/platform/services/<role>` = address under a TTL lease while the
 * component answers there (src/announce-sidekick.ts) until SIGTERM, then revokes it.
 */
export async function runAnnounce(flags: AnnounceFlags, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const options = announceOptions(flags, env);
  const { etcd, etcdSecurity } = resolveEtcd(flags, env);
  if (!etcd) throw new ConfigError('announce needs --etcd (or PLATFORM_ETCD): a sidekick shares the store with the component');
  const log = pino({ level: env.PLATFORM_LOG_LEVEL ?? 'info' });
  logProcessWarnings(log);
  const store = await openStore({ etcd, etcdSecurity, dataDir: '', warn: (message) => log.warn(message) });
  const sidekick = new AnnounceSidekick(store, { ...options, log });
  await sidekick.start();
  log.info({ component: options.component, address: options.address, ttlSeconds: options.ttlSeconds, checkIntervalMs: options.checkIntervalMs }, 'probing the component');
  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    void sidekick
      .close()
      .then(() => store.close())
      .then(() => process.exit(0));
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

/** The checked settings of `platform announce`; a probe interval above a third of the TTL could let a dead component stay announced past its TTL. */
export function announceOptions(flags: AnnounceFlags, env: NodeJS.ProcessEnv): { component: Component; address: string; ttlSeconds: number; checkIntervalMs: number } {
  if (!(components as readonly string[]).includes(flags.role)) throw new ConfigError(`--role must be one of ${components.join(', ')}`);
  if (!/^[a-zA-Z0-9.[\]:-]+:\d{1,5}$/.test(flags.address)) throw new ConfigError(`--address must be host:port, got ${flags.address}`);
  const ttlText = flags.announceTtl ?? (env.PLATFORM_ANNOUNCE_TTL || undefined) ?? '10';
  const ttlSeconds = Number(ttlText);
  if (!Number.isInteger(ttlSeconds) || ttlSeconds < 2 || ttlSeconds > 600) throw new ConfigError(`--announce-ttl must be an integer from 2 to 600, got ${ttlText}`);
  // A quarter of the TTL leaves room for a slow probe within the TTL (withdrawal takes up to three intervals).
  const intervalText = flags.checkInterval ?? String(Math.min(2, ttlSeconds / 4));
  const interval = Number(intervalText);
  if (!Number.isFinite(interval) || interval < 0.1 || interval * 3 > ttlSeconds) {
    throw new ConfigError(`--check-interval must be from 0.1 s to a third of --announce-ttl (${ttlSeconds} s), so a silent component is withdrawn within the TTL; got ${intervalText}`);
  }
  return { component: flags.role as Component, address: flags.address, ttlSeconds, checkIntervalMs: Math.round(interval * 1000) };
}
