import type { Store } from '../store/store.js';
import { certificatePrefix } from '../store/keys.js';
import { PrefixCache, decodeCached } from '../store/prefix-cache.js';
import type { CertificateRecord, CertificateSource } from '../schemas/certificate.js';

// The certificates every gateway serves, as a watched in-memory set: host (or `*.domain`) → PEM
// chain, PEM key, end of validity. It knows nothing of a data plane: the Node plane builds secure
// contexts from it, an HAProxy plane would load the same entries through `set ssl cert` or a
// crt-list. While the store does not answer, the last set keeps serving.

export interface CertificateEntry {
  /** `svc.example.com` or `*.example.com`. */
  host: string;
  /** PEM, leaf first. */
  chain: string;
  key: string;
  notBefore: number;
  notAfter: number;
  source: CertificateSource;
  /** SHA-256 of the leaf: an entry with the same fingerprint is the same certificate. */
  fingerprint: string;
}

/** The host an entry for `name` would be stored under one label up: `a.example.com` → `*.example.com`. */
export const wildcardOf = (name: string): string | undefined => {
  const dot = name.indexOf('.');
  return dot > 0 ? `*.${name.slice(dot + 1)}` : undefined;
};

export class CertificateSet {
  private entries = new Map<string, CertificateEntry>();
  private readonly listeners: (() => void)[] = [];

  private constructor(private readonly cache: PrefixCache) {}

  static async start(store: Store): Promise<CertificateSet> {
    const set = new CertificateSet(await PrefixCache.start(store, certificatePrefix));
    set.rebuild();
    set.cache.onChange(() => set.rebuild());
    return set;
  }

  /** The entry stored for exactly this host (or wildcard). */
  get(host: string): CertificateEntry | undefined {
    return this.entries.get(host);
  }

  /** The entry serving a name: its own, else the wildcard one label up. */
  find(name: string): CertificateEntry | undefined {
    const wildcard = wildcardOf(name);
    return this.entries.get(name) ?? (wildcard === undefined ? undefined : this.entries.get(wildcard));
  }

  all(): CertificateEntry[] {
    return [...this.entries.values()];
  }

  /** Calls `listener` after the set changed. */
  onChange(listener: () => void): void {
    this.listeners.push(listener);
  }

  close(): Promise<void> {
    return this.cache.close();
  }

  private rebuild(): void {
    let values;
    try {
      values = this.cache.values();
    } catch {
      return; // the store does not answer: keep serving what was last known
    }
    const entries = new Map<string, CertificateEntry>();
    for (const value of values) {
      try {
        const record = decodeCached<CertificateRecord>(value);
        entries.set(record.host, {
          host: record.host,
          chain: record.chain,
          key: record.key,
          notBefore: Date.parse(record.notBefore),
          notAfter: Date.parse(record.notAfter),
          source: record.source,
          fingerprint: record.fingerprint,
        });
      } catch {
        // not a record this version understands: not served
      }
    }
    this.entries = entries;
    for (const listener of this.listeners) listener();
  }
}
