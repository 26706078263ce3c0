import { api } from './api.js';
import { h, setText } from './element.js';
import { formatTime } from './format.js';
import type { ReplyOf } from '../../schemas/api.js';

// The HTTPS line of a service page: the certificate its public host is served with, or how
// ordering one from ACME goes (a failure with the ACME server's reason and the next attempt).
// Certificates are not in the event stream: the line is fetched when the page opens and again
// when the journal gains a certificate line for the service.

type ServiceCertificate = ReplyOf<'GET /services/:name/certificate'>;

export function describeCertificate(reply: ServiceCertificate): string {
  if (!reply.publicFacing) return 'not public-facing: no certificate';
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
  private signature = '';

  constructor(private readonly service: string) {
    this.text = h('span', {}, 'Loading…');
    this.element = h('p', { class: 'https-status' }, h('strong', {}, 'HTTPS: '), this.text);
  }

  /** Fetches again when `signature` (the service's public flag and its certificate journal lines) changed. */
  refresh(signature: string): void {
    if (signature === this.signature) return;
    this.signature = signature;
    api('GET /services/:name/certificate', { params: { name: this.service } }).then(
      (reply) => setText(this.text, describeCertificate(reply)),
      (error: unknown) => setText(this.text, `unknown (${(error as Error).message})`),
    );
  }
}
