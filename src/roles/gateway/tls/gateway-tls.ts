import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import type { Store } from '../../../store/store.js';
import type { GatewayTlsConfig } from '../../../config.js';
import { CertificateSet } from '../../../certificates/certificate-set.js';
import { ChallengeAnswers } from '../../../certificates/acme/challenge-answers.js';
import { AcmeOrderer } from '../../../certificates/acme/acme-orderer.js';
import { hostName, type Domains } from '../../../http/host-name.js';
import { PublicHosts } from './public-hosts.js';

// HTTPS on the gateway (docs/gateway.md "HTTPS", docs/gateway.md), the part both data planes share: the
// watched certificate set, the public host names, the ACME orderer, and on the plain listener ACME
// HTTP-01 answers and (with --https-redirect) 308s to HTTPS. It knows nothing of who terminates
// TLS: the Node plane opens a NodeTlsListener (node-tls-listener.ts) over `served`, the HAProxy
// plane loads the same set into HAProxy (haproxy-certificates.ts); either reports its port here.

export interface GatewayTlsOptions {
  store: Store;
  log: FastifyBaseLogger;
  settings: GatewayTlsConfig;
  domains: Domains;
  exposeComponents: boolean;
}

export class GatewayTls {
  /** Where the data plane that terminates TLS listens, once it does. */
  private port: number | undefined;

  private constructor(
    private readonly options: GatewayTlsOptions,
    private readonly parts: { certificates: CertificateSet; hosts: PublicHosts; challenges: ChallengeAnswers; orderer: AcmeOrderer | undefined },
  ) {}

  static async start(options: GatewayTlsOptions): Promise<GatewayTls> {
    const { store, settings } = options;
    const started: { close(): Promise<void> }[] = [];
    try {
      const certificates = await CertificateSet.start(store);
      started.push(certificates);
      const hosts = await PublicHosts.start(store, options.domains, options.exposeComponents);
      started.push(hosts);
      const challenges = await ChallengeAnswers.start(store);
      started.push(challenges);
      const orderer = settings.acme && (await AcmeOrderer.start({ store, acme: settings.acme, certificates, hosts, challenges, log: options.log }));
      return new GatewayTls(options, { certificates, hosts, challenges, orderer: orderer || undefined });
    } catch (error) {
      await Promise.all(started.map((part) => part.close()));
      throw error;
    }
  }

  /** The certificates and public host names, for the data plane that terminates TLS. */
  get served(): { certificates: CertificateSet; hosts: PublicHosts } {
    return { certificates: this.parts.certificates, hosts: this.parts.hosts };
  }

  /** The data plane terminating TLS listens on `port`: redirects and /readyz name it. */
  servedOn(port: number): void {
    this.port = port;
  }

  /** The plain listener's part: ACME challenges, then redirects. True when the request was answered. */
  handlePlain(req: IncomingMessage, res: ServerResponse): boolean {
    if (this.parts.challenges.answer(req, res)) return true;
    if (!this.options.settings.httpsRedirect) return false;
    const host = hostName(req.headers.host);
    if (!this.parts.hosts.has(host)) return false;
    const port = this.port;
    res.writeHead(308, { location: `https://${host}${port === 443 || port === undefined ? '' : `:${port}`}${req.url ?? '/'}`, 'content-length': 0 });
    res.end();
    return true;
  }

  /** For /readyz: where HTTPS listens, how many certificates it holds, and the hosts ACME fails to order. */
  readiness(): Record<string, unknown> {
    return {
      https: {
        port: this.port,
        certificates: this.parts.certificates.all().length,
        ...(this.parts.orderer ? { acmeFailing: this.parts.orderer.failing().map(({ host, error, failures, nextAttemptAt }) => ({ host, error, failures, nextAttemptAt })) } : {}),
      },
    };
  }

  /** After the data plane that serves TLS has closed. */
  async close(): Promise<void> {
    await this.parts.orderer?.close();
    await Promise.all([this.parts.certificates.close(), this.parts.hosts.close(), this.parts.challenges.close()]);
  }
}
