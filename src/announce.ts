import { pino } from 'pino';
import { ConfigError, resolveEtcd, type EtcdFlags } from './config.js';
import { openStore } from './store/open-store.js';
import { LeasedKeys } from './store/leased-keys.js';
import { componentKey, components, type Component } from './store/keys.js';

export type AnnounceFlags = EtcdFlags & { role: string; address: string; announceTtl: string };

/** `platform announce`: keeps `/platform/services/<role>` = address alive until SIGTERM, then revokes it. */
export async function runAnnounce(flags: AnnounceFlags): Promise<void> {
  if (!(components as readonly string[]).includes(flags.role)) throw new ConfigError(`--role must be one of ${components.join(', ')}`);
  if (!/^[a-zA-Z0-9.[\]:-]+:\d{1,5}$/.test(flags.address)) throw new ConfigError(`--address must be host:port, got ${flags.address}`);
  const { etcd, etcdSecurity } = resolveEtcd(flags, process.env);
  if (!etcd) throw new ConfigError('announce needs --etcd (or PLATFORM_ETCD): a sidekick shares the store with the component');
  const log = pino();
  const store = await openStore({ etcd, etcdSecurity, dataDir: '', warn: (message) => log.warn(message) });
  const keys = await LeasedKeys.start(store, Number(flags.announceTtl), log);
  await keys.set(componentKey(flags.role as Component), flags.address);
  log.info({ key: componentKey(flags.role as Component), address: flags.address }, 'announced');
  const stop = () => void keys.close().then(() => store.close()).then(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}
