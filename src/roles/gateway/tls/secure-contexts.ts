import { createSecureContext, type SecureContext } from 'node:tls';
import type { FastifyBaseLogger } from 'fastify';
import type { CertificateSet } from '../../../certificates/certificate-set.js';
import type { PublicHosts } from './public-hosts.js';
import { secureContextBuilt } from '../gateway-metrics.js';

// The Node data plane's certificates: one secure context per stored certificate, made when the
// certificate set changes and picked per connection by SNI. A new or renewed certificate replaces
// its context for the next handshake; connections already open keep theirs, so nothing is
// restarted or refused. Only the Node plane's TLS listener makes these (node-tls-listener.ts).

/** TLS 1.2 and 1.3 only. */
export const tlsVersions = { minVersion: 'TLSv1.2', maxVersion: 'TLSv1.3' } as const;

export class SecureContexts {
  private contexts = new Map<string, { fingerprint: string; context: SecureContext }>();

  constructor(
    private readonly certificates: CertificateSet,
    private readonly publicHosts: PublicHosts,
    private readonly log: FastifyBaseLogger,
  ) {
    this.refresh();
    certificates.onChange(() => this.refresh());
  }

  /** The context for a server name, if it is a public host and a certificate covers it. */
  contextFor(serverName: string): SecureContext | undefined {
    const name = serverName.toLowerCase().replace(/\.$/, '');
    if (!this.publicHosts.has(name)) return undefined;
    const entry = this.certificates.find(name);
    return entry === undefined ? undefined : this.contexts.get(entry.host)?.context;
  }

  /** Node's SNICallback: a handshake for a name with no context fails (the client sees an alert). */
  readonly sniCallback = (serverName: string, done: (error: Error | null, context?: SecureContext) => void): void => {
    const context = this.contextFor(serverName);
    if (context === undefined) done(new Error(`no certificate for ${serverName}`));
    else done(null, context);
  };

  private refresh(): void {
    const next = new Map<string, { fingerprint: string; context: SecureContext }>();
    for (const entry of this.certificates.all()) {
      const current = this.contexts.get(entry.host);
      if (current?.fingerprint === entry.fingerprint) {
        next.set(entry.host, current);
        continue;
      }
      try {
        next.set(entry.host, { fingerprint: entry.fingerprint, context: createSecureContext({ cert: entry.chain, key: entry.key, ...tlsVersions }) });
        secureContextBuilt();
        this.log.info({ host: entry.host, source: entry.source, notAfter: new Date(entry.notAfter).toISOString() }, 'certificate loaded');
      } catch (error) {
        // OpenSSL's message names the failing step, never the key's content.
        this.log.warn({ host: entry.host, reason: (error as Error).message }, 'certificate not loaded');
        if (current) next.set(entry.host, current);
      }
    }
    this.contexts = next;
  }
}
