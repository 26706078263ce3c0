import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type { FastifyBaseLogger } from 'fastify';
import type { Store } from '../../../store/store.js';
import type { GatewayTlsConfig } from '../../../config.js';
import { createLimitedServer, type ConnectionLimits } from '../../../http/connection-limits.js';
import { CertificateSet } from '../../../certificates/certificate-set.js';
import { ChallengeAnswers } from '../../../certificates/acme/challenge-answers.js';
import { AcmeOrderer } from '../../../certificates/acme/acme-orderer.js';
import { hostName, type Domains } from '../host-name.js';
import { PublicHosts } from './public-hosts.js';
import { SecureContexts, tlsVersions } from './secure-contexts.js';

// HTTPS on the gateway (README "HTTPS", docs/gateway.md): on the Node data plane a TLS listener
// beside the plain one, serving the public hosts with the certificates in the store; on the plain
// listener, ACME HTTP-01 answers and (with --https-redirect) 308s to HTTPS. The certificate set,
// the public host names and the ACME orderer know nothing of Node's TLS: the HAProxy data plane
// takes them as they are (haproxy-certificates.ts) and terminates TLS itself, and then this TLS
// listener is not opened.

export interface GatewayTlsOptions {
  store: Store;
  log: FastifyBaseLogger;
  settings: GatewayTlsConfig;
  domains: Domains;
  exposeComponents: boolean;
  limits: ConnectionLimits;
  maxHeaderSize: number;
  /** What the plain listener does with a request: the TLS listener does the same after TLS. */
  handler: (req: IncomingMessage, res: ServerResponse) => void;
  upgrade: (req: IncomingMessage, socket: Duplex, head: Buffer) => void;
}

export class GatewayTls {
  private constructor(
    private readonly options: GatewayTlsOptions,
    private readonly server: Server,
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
      const contexts = new SecureContexts(certificates, hosts, options.log);
      const hsts = settings.hstsMaxAgeSeconds === undefined ? undefined : `max-age=${settings.hstsMaxAgeSeconds}`;
      const server = createLimitedServer(
        'gateway',
        options.limits,
        (req, res) => {
          if (hsts !== undefined && hosts.has(hostName(req.headers.host))) res.setHeader('strict-transport-security', hsts);
          options.handler(req, res);
        },
        { maxHeaderSize: options.maxHeaderSize, tls: { SNICallback: contexts.sniCallback, ...tlsVersions } },
      );
      server.on('upgrade', options.upgrade);
      return new GatewayTls(options, server, { certificates, hosts, challenges, orderer: orderer || undefined });
    } catch (error) {
      await Promise.all(started.map((part) => part.close()));
      throw error;
    }
  }

  /** The certificates and public host names, for a data plane that terminates TLS itself. */
  get served(): { certificates: CertificateSet; hosts: PublicHosts } {
    return { certificates: this.parts.certificates, hosts: this.parts.hosts };
  }

  /** Where another data plane (HAProxy) serves HTTPS, when this listener is not opened. */
  private servedPort: number | undefined;

  servedOn(port: number): void {
    this.servedPort = port;
  }

  /** The HTTPS port: where this listener listens, else where HAProxy does. */
  private port(): number | undefined {
    return (this.server.address() as AddressInfo | null)?.port ?? this.servedPort;
  }

  /** The plain listener's part: ACME challenges, then redirects. True when the request was answered. */
  handlePlain(req: IncomingMessage, res: ServerResponse): boolean {
    if (this.parts.challenges.answer(req, res)) return true;
    if (!this.options.settings.httpsRedirect) return false;
    const host = hostName(req.headers.host);
    if (!this.parts.hosts.has(host)) return false;
    const port = this.port();
    res.writeHead(308, { location: `https://${host}${port === 443 || port === undefined ? '' : `:${port}`}${req.url ?? '/'}`, 'content-length': 0 });
    res.end();
    return true;
  }

  listen(host: string): Promise<void> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.options.settings.httpsPort, host, () => {
        this.server.off('error', reject);
        this.options.log.info({ port: (this.server.address() as AddressInfo).port }, 'HTTPS listener open');
        resolve();
      });
    });
  }

  /** For /readyz: where HTTPS listens, how many certificates it holds, and the hosts ACME fails to order. */
  readiness(): Record<string, unknown> {
    return {
      https: {
        port: this.port(),
        certificates: this.parts.certificates.all().length,
        ...(this.parts.orderer ? { acmeFailing: this.parts.orderer.failing().map(({ host, error, failures, nextAttemptAt }) => ({ host, error, failures, nextAttemptAt })) } : {}),
      },
    };
  }

  /** Stops accepting; open requests get `graceMs`, then connections are cut. */
  async close(graceMs: number): Promise<void> {
    // Resolves also when the listener was never opened (HAProxy's plane).
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.server.closeIdleConnections();
    const cut = setTimeout(() => this.server.closeAllConnections(), graceMs);
    await this.parts.orderer?.close();
    await closed;
    clearTimeout(cut);
    await Promise.all([this.parts.certificates.close(), this.parts.hosts.close(), this.parts.challenges.close()]);
  }
}
