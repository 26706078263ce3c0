import { api } from './api.js';
import { h, setText } from './element.js';
import { formatTime } from './format.js';
import type { ReplyOf } from '../../schemas/api.js';

// The address and HTTPS lines of a service page: its URL as a link, the certificate its public
// host is served with, or how ordering one from ACME goes (a failure with the ACME server's reason
// and the next attempt), or why none will come.
// Certificates are not in the event stream: the line is fetched when the page opens and again
// when the journal gains a certificate line for the service.

type ServiceCertificate = ReplyOf<'GET /services/:name/certificate'>;

export function describeCertificate(reply: ServiceCertificate): string {
  if (!reply.publicFacing) return 'not public-facing: no certificate';
  if (!reply.certificate && reply.noCertificateExpected) return `no certificate expected: ${reply.noCertificateExpected}`;
  const serving = reply.certificate
    ? `${reply.certificate.source === 'acme' ? 'ACME' : 'operator'} certificate for ${reply.certificate.host}, expires ${formatTime(reply.certificate.notAfter)}`
    : 'no certificate yet';
  if (reply.acme?.state === 'failed') return `${serving}; ordering failed: ${reply.acme.error ?? 'unknown reason'} (next attempt ${formatTime(reply.acme.nextAttemptAt)})`;
  if (reply.acme?.state === 'ordering') return `${serving}; ordering from ACME…`;
  return serving;
}

export class CertificateStatus {
  readonly element: HTMLElement;
  private readonly text: HTMLElement;
  private readonly address: HTMLElement;
  private signature = '';

  constructor(private readonly service: string) {
    this.text = h('span', {}, 'Loading…');
    this.address = h('p', { class: 'service-url', hidden: true });
    this.element = h('div', {}, this.address, h('p', { class: 'https-status' }, h('strong', {}, 'HTTPS: '), this.text));
  }

  /** Fetches again when `signature` (the service's public flag and its certificate journal lines) changed. */
  refresh(signature: string): void {
    if (signature === this.signature) return;
    this.signature = signature;
    api('GET /services/:name/certificate', { params: { name: this.service } }).then(
      (reply) => {
        setText(this.text, describeCertificate(reply));
        this.showAddress(reply.url);
      },
      (error: unknown) => setText(this.text, `unknown (${(error as Error).message})`),
    );
  }

  private showAddress(url: string | undefined): void {
    this.address.hidden = url === undefined;
    if (url === undefined) return;
    const text = url.replace(/\/$/, '');
    this.address.replaceChildren(h('strong', {}, 'Address: '), h('a', { href: url, target: '_blank', rel: 'noopener noreferrer' }, text));
  }
}
