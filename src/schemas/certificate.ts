import { Type, type Static } from '@sinclair/typebox';
import { ErrorReply, NameParams, errorResponses, literalUnion } from './common.js';

// TLS certificates the gateways serve (docs/gateway.md "HTTPS"): given by an operator or obtained from
// ACME. A listing carries what people need to know of one (names, issuer, dates, source); the
// private key goes in with `POST /certificates` and never comes out of any route.

const LABEL = '[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?';

export const CertificateHost = Type.String({
  pattern: `^(\\*\\.)?${LABEL}(\\.${LABEL})+$`,
  maxLength: 253,
  description: 'a lowercase DNS name with at least two labels (svc.example.com), or a wildcard over one label (*.example.com)',
  examples: ['*.example.com'],
});

export const CertificateSource = literalUnion(['operator', 'acme'] as const, { description: '"operator" (platform cert add) or "acme" (ordered by a gateway)' });
export type CertificateSource = Static<typeof CertificateSource>;

/** A certificate as listed: never its key. */
export const Certificate = Type.Object(
  {
    host: CertificateHost,
    source: CertificateSource,
    /** Every DNS name the certificate covers. */
    names: Type.Array(Type.String()),
    issuer: Type.String({ description: "the issuer's distinguished name, as OpenSSL prints it" }),
    notBefore: Type.String({ format: 'date-time' }),
    notAfter: Type.String({ format: 'date-time' }),
    /** SHA-256 of the leaf certificate, as `openssl x509 -fingerprint -sha256` prints it. */
    fingerprint: Type.String(),
    updatedAt: Type.String({ format: 'date-time' }),
  },
  { $id: 'Certificate' },
);
export type Certificate = Static<typeof Certificate>;

/** What the store holds: the listing, the PEM chain (leaf first) and the PEM private key. */
export type CertificateRecord = Certificate & { chain: string; key: string };

export const CertificateAdd = Type.Object(
  {
    host: CertificateHost,
    certificate: Type.String({ minLength: 1, maxLength: 64 * 1024, description: 'PEM certificates, the one for the host first, then its intermediates' }),
    key: Type.String({ minLength: 1, maxLength: 16 * 1024, description: 'the PEM private key of the first certificate, unencrypted' }),
  },
  { additionalProperties: false },
);
export type CertificateAdd = Static<typeof CertificateAdd>;

export const AcmeState = literalUnion(['ordering', 'issued', 'failed'] as const);

/** How ordering a host's certificate from ACME last went. */
export const AcmeStatus = Type.Object(
  {
    host: Type.String(),
    state: AcmeState,
    /** Failed orders in a row since the last certificate. */
    failures: Type.Integer({ minimum: 0 }),
    /** The ACME server's reason for the last failure. */
    error: Type.Optional(Type.String()),
    nextAttemptAt: Type.Optional(Type.String({ format: 'date-time' })),
    updatedAt: Type.String({ format: 'date-time' }),
  },
  { $id: 'AcmeStatus' },
);
export type AcmeStatus = Static<typeof AcmeStatus>;

export const ServiceCertificate = Type.Object({
  host: Type.String({ description: '<service>.<domain>; absent certificate and acme when the service is not public-facing' }),
  publicFacing: Type.Boolean(),
  certificate: Type.Optional(Certificate),
  acme: Type.Optional(AcmeStatus),
  url: Type.Optional(
    Type.String({
      description:
        "where the service is reached through the gateways: https://<service>.<domain>/ when its host has a certificate, http:// when not; http://<service>.<internal domain>/ when it is not public-facing; absent when it is not load balanced (no gateway routes it)",
    }),
  ),
  noCertificateExpected: Type.Optional(
    Type.String({ description: 'without a certificate: why none will come unless an operator adds one (a domain no public DNS answers for, no gateway ordering from ACME, single-machine mode)' }),
  ),
});
export type ServiceCertificate = Static<typeof ServiceCertificate>;

export const CertificateParams = Type.Object({ host: CertificateHost });

const adminErrors = { 401: ErrorReply, 403: ErrorReply, ...errorResponses };

export const addCertificateSchema = {
  description:
    'Store a certificate and its private key for a host or a *.domain wildcard (admin); every gateway serves it at once. ' +
    'Refused with 400 when the key does not match, the certificate has expired or does not cover the host.',
  body: CertificateAdd,
  response: { 201: Certificate, ...adminErrors },
} as const;

export const listCertificatesSchema = {
  description: 'Every certificate the gateways serve, with its ACME status when it is ordered (admin). Never a key.',
  response: {
    200: Type.Array(
      Type.Object({
        certificate: Type.Optional(Certificate),
        acme: Type.Optional(AcmeStatus),
        host: Type.String(),
        serving: Type.Array(Type.String(), {
          description:
            "the routed public hosts the certificate serves (public-facing services, and the orchestrator's and dashboard's names while they are announced); empty when it serves none, as an operator's certificate for a deleted service",
        }),
      }),
    ),
    ...adminErrors,
  },
} as const;

export const removeCertificateSchema = {
  description: "Remove a host's certificate (admin). A host ACME serves is ordered again.",
  params: CertificateParams,
  response: { 204: Type.Null(), ...adminErrors },
} as const;

export const serviceCertificateSchema = {
  description: "The certificate the gateways serve for the service's public host, and how ordering it from ACME goes.",
  params: NameParams,
  response: { 200: ServiceCertificate, ...errorResponses },
} as const;
