import { EmbeddedStore } from './embedded-store.js';
import { EtcdStore } from './etcd-store.js';
import type { Store } from './store.js';

export interface OpenStoreOptions {
  /** etcd client URLs; when given (and not empty), etcd is the store. */
  etcd?: string[];
  /** Where the embedded store keeps its files when no etcd is given. */
  dataDir: string;
}

/**
 * The store this process talks to: etcd when URLs are given, else the embedded store under
 * `dataDir`. An etcd store is returned without contacting etcd, so roles start while etcd is
 * down and report it on /readyz; the embedded store is opened (and locked) here.
 */
export async function openStore(options: OpenStoreOptions): Promise<Store> {
  const urls = (options.etcd ?? []).map((url) => url.trim()).filter((url) => url !== '');
  if (urls.length > 0) return new EtcdStore(urls);
  if (options.dataDir === '') throw new Error('no store configured: give etcd URLs (--etcd) or a data directory (--data-dir)');
  return EmbeddedStore.open(options.dataDir);
}
