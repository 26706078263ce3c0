import { EmbeddedStore } from './embedded-store.js';
import { EtcdStore, type EtcdSecurity } from './etcd-store.js';
import { setTimeout as sleep } from 'node:timers/promises';
import { checkEtcdAccess, etcdWaitPauseMs } from './etcd-access.js';
import type { Store } from './store.js';

export interface OpenStoreOptions {
  /** etcd client URLs; when given (and not empty), etcd is the store. */
  etcd?: string[];
  /** TLS material and user for etcd. */
  etcdSecurity?: EtcdSecurity;
  /** Where the embedded store keeps its files when no etcd is given. */
  dataDir: string;
  /** Told when etcd is unreachable at start: each look that finds it so, and when the wait ends. */
  warn?: (message: string) => void;
  /**
   * How long to wait for an unreachable etcd to answer before returning the store anyway (default
   * 0: one look). The roles' start waits (ROLE_START_ETCD_WAIT_MS in src/roles/launch.ts).
   */
  waitForEtcdMs?: number;
  /** Ends the wait early: openStore then throws the signal's reason. */
  signal?: AbortSignal;
}

/**
 * The store this process talks to: etcd when URLs are given, else the embedded store under
 * `dataDir`. etcd is looked at (src/store/etcd-access.ts): a refused certificate or login throws
 * EtcdAccessError within seconds, at the first look; an unreachable etcd is looked at again, with
 * growing pauses, for up to `waitForEtcdMs`, each look reported through `warn`, and the store is
 * returned once it answers or the time is up. The embedded store is opened (and locked) here.
 */
export async function openStore(options: OpenStoreOptions): Promise<Store> {
  const urls = (options.etcd ?? []).map((url) => url.trim()).filter((url) => url !== '');
  if (urls.length > 0) return openEtcd(urls, options);
  if (options.dataDir === '') throw new Error('no store configured: give etcd URLs (--etcd) or a data directory (--data-dir)');
  return EmbeddedStore.open(options.dataDir);
}

async function openEtcd(urls: string[], options: OpenStoreOptions): Promise<Store> {
  const security = options.etcdSecurity ?? {};
  const store = new EtcdStore(urls, { security });
  try {
    await waitForEtcd(store, urls, security, options);
  } catch (error) {
    await store.close();
    throw error;
  }
  return store;
}

/** Looks at etcd until it answers or `waitForEtcdMs` is up (see openStore); a refusal throws at the first look. */
export async function waitForEtcd(store: Store, urls: string[], security: EtcdSecurity, options: OpenStoreOptions): Promise<void> {
  const warn = options.warn ?? (() => undefined);
  const maxWaitMs = options.waitForEtcdMs ?? 0;
  const since = Date.now();
  for (let look = 1; ; look++) {
    options.signal?.throwIfAborted();
    const access = await checkEtcdAccess(store, urls, security);
    if (access.reachable) {
      if (look > 1) warn(`etcd at ${urls.join(',')}: answers after ${seconds(Date.now() - since)} of waiting`);
      return;
    }
    const waited = Date.now() - since;
    if (waited >= maxWaitMs) {
      warn(`etcd at ${urls.join(',')}: unreachable (${access.cause})${maxWaitMs > 0 ? `; gave up waiting after ${seconds(waited)}` : ''}`);
      return;
    }
    const pause = Math.min(etcdWaitPauseMs(look), maxWaitMs - waited);
    warn(`etcd at ${urls.join(',')}: unreachable (${access.cause}); waiting for it (${seconds(waited)} so far, at most ${seconds(maxWaitMs)}), next look in ${seconds(pause)}`);
    // Aborted, sleep throws an AbortError: the signal's own reason says who stopped the wait.
    await sleep(pause, undefined, options.signal ? { signal: options.signal } : {}).catch((error: unknown) => {
      throw options.signal?.aborted ? options.signal.reason : error;
    });
  }
}

const seconds = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;
