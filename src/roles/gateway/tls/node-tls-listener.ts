import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type { FastifyBaseLogger } from 'fastify';
import { createLimitedServer, type ConnectionLimits } from '../../../http/connection-limits.js';
import type { CertificateSet } from '../../../certificates/certificate-set.js';
import { hostName } from '../../../http/host-name.js';
import type { PublicHosts } from './public-hosts.js';
import { SecureContexts, tlsVersions } from './secure-contexts.js';

// The Node data plane's TLS listener: Node terminates TLS with one secure context per
// certificate, picked by SNI, then handles the request as the plain listener does. Made only when
// the Node plane serves (start.ts): under HAProxy, HAProxy terminates TLS from the same
// certificate set, and no secure context is built here.

export interface NodeTlsListenerOptions {
  certificates: CertificateSet;
  hosts: PublicHosts;
  log: FastifyBaseLogger;
  /** 0: a free port. */
  port: number;
  hstsMaxAgeSeconds: number | undefined;
  limits: ConnectionLimits;
  maxHeaderSize: number;
  /** What the plain listener does with a request: this listener does the same after TLS. */
  handler: (req: IncomingMessage, res: ServerResponse) => void;
  upgrade: (req: IncomingMessage, socket: Duplex, head: Buffer) => void;
}

export class NodeTlsListener {
  private readonly server: Server;
  private readonly contexts: SecureContexts;

  constructor(private readonly options: NodeTlsListenerOptions) {
    const { hosts } = options;
    this.contexts = new SecureContexts(options.certificates, hosts, options.log);
    const hsts = options.hstsMaxAgeSeconds === undefined ? undefined : `max-age=${options.hstsMaxAgeSeconds}`;
    this.server = createLimitedServer(
      'gateway',
      options.limits,
      (req, res) => {
        if (hsts !== undefined && hosts.has(hostName(req.headers.host))) res.setHeader('strict-transport-security', hsts);
        options.handler(req, res);
      },
      { maxHeaderSize: options.maxHeaderSize, tls: { SNICallback: this.contexts.sniCallback, ...tlsVersions } },
    );
    this.server.on('upgrade', options.upgrade);
  }

  /** Resolves with the port it listens on. */
  listen(host: string): Promise<number> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.options.port, host, () => {
        this.server.off('error', reject);
        const { port } = this.server.address() as AddressInfo;
        this.options.log.info({ port }, 'HTTPS listener open');
        resolve(port);
      });
    });
  }

  /** Stops accepting; open requests get `graceMs`, then connections are cut. */
  async close(graceMs: number): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.server.closeIdleConnections();
    const cut = setTimeout(() => this.server.closeAllConnections(), graceMs);
    await closed;
    clearTimeout(cut);
  }
}
