import { isIP } from 'node:net';

// Pure: why a public-facing service's host will get no certificate unless an operator adds one,
// so the dashboard and the API say so instead of "no certificate yet" for a certificate that
// will never come.

/** Top-level names no public DNS answers for (RFC 6761, 6762, 8375, 9476, ICANN's .internal), and .lan as home routers use it. */
const PRIVATE_TOP_LEVEL = new Set(['local', 'localhost', 'test', 'invalid', 'example', 'internal', 'arpa', 'alt', 'onion', 'lan', 'home', 'corp', 'localdomain']);

export function isPublicDomain(domain: string): boolean {
  const labels = domain.toLowerCase().replace(/\.$/, '').split('.');
  if (isIP(domain) !== 0 || labels.length < 2) return false;
  return !PRIVATE_TOP_LEVEL.has(labels.at(-1)!);
}

export interface CertificateExpectation {
  domain: string;
  /** Gateways running now, and how many of them order certificates from ACME (--acme-email). */
  gateways: number;
  acmeGateways: number;
  /** `platform up`: every role in this one process. */
  singleMachine: boolean;
}

/** Why no certificate will come for a public host of `domain` without an operator's; undefined when ACME will order one. */
export function whyNoCertificate(host: string, expectation: CertificateExpectation): string | undefined {
  const { domain, gateways, acmeGateways, singleMachine } = expectation;
  const add = `an operator certificate (platform cert add ${host} …) serves HTTPS here`;
  if (!isPublicDomain(domain)) return `${domain} is not a public DNS domain, so no ACME server can reach ${host} to check it; ${add}`;
  if (acmeGateways > 0) return undefined;
  if (singleMachine) return `single-machine mode (platform up) orders no certificate unless started with --acme-email; ${add}`;
  if (gateways === 0) return `no gateway is running to order one; ${add}`;
  return `no gateway orders certificates from ACME (none runs with --acme-email); ${add}`;
}
