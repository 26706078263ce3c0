import { EmbeddedStore } from './embedded-store.js';
import { EtcdStore, type EtcdSecurity } from './etcd-store.js';
import { checkEtcdAccess } from './etcd-access.js';
import type { Store } from './store.js';

export interface OpenStoreOptions {
  /** etcd client URLs; when given (and not empty), etcd is the store. */
  etcd?: string[];
  /** TLS material and user for etcd. */
  etcdSecurity?: EtcdSecurity;
  /** Where the embedded store keeps its files when no etcd is given. */
  dataDir: string;
  /** Told when etcd is unreachable at start (the store is returned anyway). */
  warn?: (message: string) => void;
}

/**
 * The store this process talks to: etcd when URLs are given, else the embedded store under
 * `dataDir`. etcd is contacted once (src/store/etcd-access.ts): a refused certificate or login
 * throws EtcdAccessError within seconds, while an unreachable etcd is only reported through `warn`
 * and the store returned, as before. The embedded store is opened (and locked) here.
 */
export async function openStore(options: OpenStoreOptions): Promise<Store> {
  const urls = (options.etcd ?? []).map((url) => url.trim()).filter((url) => url !== '');
  if (urls.length > 0) return openEtcd(urls, options.etcdSecurity ?? {}, options.warn ?? (() => undefined));
  if (options.dataDir === '') throw new Error('no store configured: give etcd URLs (--etcd) or a data directory (--data-dir)');
  return EmbeddedStore.open(options.dataDir);
}

async function openEtcd(urls: string[], security: EtcdSecurity, warn: (message: string) => void): Promise<Store> {
  const store = new EtcdStore(urls, { security });
  try {
    await checkEtcdAccess(store, urls, security, warn);
  } catch (error) {
    await store.close();
    throw error;
  }
  return store;
}
