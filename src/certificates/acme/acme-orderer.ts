import { readFileSync } from 'node:fs';
import { Agent } from 'node:https';
import { rootCertificates } from 'node:tls';
import { randomBytes } from 'node:crypto';
import acme from 'acme-client';
import type { FastifyBaseLogger } from 'fastify';
import type { Store, Lease } from '../../store/store.js';
import { acmeStatusPrefix } from '../../store/keys.js';
import { PrefixCache, decodeCached } from '../../store/prefix-cache.js';
import { appendJournal } from '../../store/records/journal.js';
import type { AcmeConfig } from '../../config.js';
import type { AcmeStatus, CertificateRecord } from '../../schemas/certificate.js';
import { describeChain } from '../certificate-check.js';
import { cachedAcmeStatus, putOrderedCertificate, readAcmeStatus, readCertificate, takeOrderLock, writeAcmeStatus } from '../certificate-records.js';
import { wildcardOf, type CertificateEntry, type CertificateSet } from '../certificate-set.js';
import { orderDueAt, retryDelayMs } from './renewal-policy.js';
import { accountKey } from './acme-account.js';
import { putChallenge, removeChallenge, type ChallengeAnswers } from './challenge-answers.js';

// Orders and renews the certificates of public hosts from ACME (RFC 8555, through acme-client),
// on every gateway with ACME on. A host is ordered by one gateway at a time: the one that creates
// the host's lock key under its lease; the others serve the result as soon as it is stored. Every
// write of an ACME status record (ordering, issued, failed with the server's reason and the next
// attempt) is made here; their removal, with the certificate, in certificate-records.ts.

/** The lock's lease: kept alive while the order runs, gone this long after a gateway dies mid-order. */
const LOCK_TTL_SECONDS = 15;
/** Longest timer set at once (setTimeout's limit is ~24.8 days; renewals of 90-day certificates lie further). */
const MAX_TIMER_MS = 86_400_000;
const MAX_REASON_LENGTH = 500;

export interface PublicHostSource {
  all(): string[];
  has(host: string): boolean;
  onChange(listener: () => void): void;
}

export interface AcmeOrdererOptions {
  store: Store;
  acme: AcmeConfig;
  certificates: CertificateSet;
  hosts: PublicHostSource;
  challenges: ChallengeAnswers;
  log: FastifyBaseLogger;
}

export class AcmeOrderer {
  private readonly ordering = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private reviewQueued = false;
  private closed = false;
  private readonly owner = randomBytes(8).toString('hex');

  private constructor(
    private readonly options: AcmeOrdererOptions,
    private readonly statuses: PrefixCache,
  ) {}

  static async start(options: AcmeOrdererOptions): Promise<AcmeOrderer> {
    if (options.acme.caFile !== undefined) {
      // acme-client talks through its own axios instance: a private ACME server's CA is trusted there only.
      acme.axios.defaults.httpsAgent = new Agent({ ca: [...rootCertificates, readFileSync(options.acme.caFile, 'utf8')] });
    }
    const orderer = new AcmeOrderer(options, await PrefixCache.start(options.store, acmeStatusPrefix));
    const review = () => orderer.queueReview();
    options.certificates.onChange(review);
    options.hosts.onChange(review);
    orderer.statuses.onChange(review);
    orderer.queueReview();
    return orderer;
  }

  /** The hosts whose last order failed, for /readyz. */
  failing(): AcmeStatus[] {
    try {
      return this.statuses
        .values()
        .map((entry) => decodeCached<AcmeStatus>(entry))
        .filter((status) => status.state === 'failed');
    } catch {
      return [];
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    await this.statuses.close();
  }

  private status(host: string): AcmeStatus | undefined {
    try {
      const entry = cachedAcmeStatus(this.statuses, host);
      return entry === undefined ? undefined : decodeCached<AcmeStatus>(entry);
    } catch {
      return undefined;
    }
  }

  private queueReview(): void {
    if (this.reviewQueued || this.closed) return;
    this.reviewQueued = true;
    queueMicrotask(() => {
      this.reviewQueued = false;
      this.review();
    });
  }

  /** Starts the orders that are due and sets the timer for the next one. */
  private review(): void {
    if (this.closed) return;
    const now = Date.now();
    let next = Infinity;
    for (const host of this.options.hosts.all()) {
      if (this.ordering.has(host)) continue;
      const due = orderDueAt(this.options.certificates.find(host), this.status(host));
      if (due <= now) void this.tryOrder(host);
      else next = Math.min(next, due);
    }
    clearTimeout(this.timer);
    if (next !== Infinity) this.timer = setTimeout(() => this.queueReview(), Math.min(next - now, MAX_TIMER_MS)).unref();
  }

  private async tryOrder(host: string): Promise<void> {
    this.ordering.add(host);
    const { store, log } = this.options;
    let lease: Lease | undefined;
    try {
      lease = await store.grantLease(LOCK_TTL_SECONDS);
      if (!(await takeOrderLock(store, host, this.owner, lease.id))) {
        // Another gateway orders it: its result arrives by watch. Look again once its lock would have lapsed.
        setTimeout(() => this.queueReview(), LOCK_TTL_SECONDS * 1000).unref();
        return;
      }
      await this.orderLocked(host, lease);
    } catch (error) {
      log.warn({ host, reason: (error as Error).message }, 'ACME order not started');
      setTimeout(() => this.queueReview(), LOCK_TTL_SECONDS * 1000).unref();
    } finally {
      await lease?.revoke().catch(() => undefined);
      this.ordering.delete(host);
      this.queueReview();
    }
  }

  /** Under the host's lock: looks again at what the store holds now, and orders if still due. */
  private async orderLocked(host: string, lease: Lease): Promise<void> {
    const { store, log } = this.options;
    const [own, covering, status] = await Promise.all([readCertificate(store, host), readCertificate(store, wildcardOf(host) ?? host), readAcmeStatus(store, host)]);
    const serving = own?.record ?? covering?.record;
    if (orderDueAt(serving && entryOf(serving), status?.record) > Date.now()) return; // another gateway has just done it
    if (!this.options.hosts.has(host)) return; // its service was deleted while the lock was taken
    const failures = status?.record.failures ?? 0;
    await this.writeStatus({ host, state: 'ordering', failures, updatedAt: new Date().toISOString() });
    log.info({ host, renewal: serving !== undefined }, 'ACME order started');
    const started = Date.now();
    try {
      const { chain, key } = await this.order(host, lease);
      const listing = describeChain(host, chain, 'acme', Date.now());
      if (!this.options.hosts.has(host)) {
        // Its service was deleted while the order ran: the scheduler's clean-up would only remove it again.
        log.info({ host }, 'ACME certificate dropped: the host is no longer public');
        return;
      }
      if (!(await putOrderedCertificate(store, { ...listing, chain, key }, own?.modRevision ?? 0))) {
        log.info({ host }, 'ACME certificate dropped: the host got another certificate meanwhile');
        return;
      }
      await this.writeStatus({ host, state: 'issued', failures: 0, updatedAt: new Date().toISOString() });
      const renewed = own?.record.source === 'acme';
      log.info({ host, notAfter: listing.notAfter, ms: Date.now() - started }, renewed ? 'ACME certificate renewed' : 'ACME certificate issued');
      await this.journal(host, renewed ? 'certificate.renewed' : 'certificate.issued', `certificate for ${host} ${renewed ? 'renewed' : 'issued'} by ${listing.issuer}, valid until ${listing.notAfter}`);
    } catch (error) {
      const reason = reasonOf(error);
      const nextAttemptAt = new Date(Date.now() + retryDelayMs(failures + 1)).toISOString();
      log.warn({ host, reason, nextAttemptAt }, 'ACME order failed');
      // Its service was deleted meanwhile: no status to leave behind, nothing to retry.
      if (!this.options.hosts.has(host)) return;
      await this.writeStatus({ host, state: 'failed', failures: failures + 1, error: reason, nextAttemptAt, updatedAt: new Date().toISOString() });
      await this.journal(host, 'certificate.failed', `ordering a certificate for ${host} failed: ${reason}; next attempt at ${nextAttemptAt}`);
    }
  }

  private async order(host: string, lease: Lease): Promise<{ chain: string; key: string }> {
    const { store, acme: settings, challenges } = this.options;
    const client = new acme.Client({ directoryUrl: settings.directoryUrl, accountKey: await accountKey(store, settings.directoryUrl) });
    const [key, csr] = await acme.crypto.createCsr({ commonName: host, altNames: [host] }, await acme.crypto.createPrivateEcdsaKey('P-256'));
    const chain = await client.auto({
      csr,
      email: settings.email,
      termsOfServiceAgreed: true,
      challengePriority: ['http-01'],
      // acme-client's own check fetches http://<host>/ on port 80 from here, which a gateway
      // behind NAT or on another port cannot; the ACME server's validation is the one that counts.
      skipChallengeVerification: true,
      challengeCreateFn: async (_authz, challenge, keyAuthorization) => {
        const revision = await putChallenge(store, challenge.token, keyAuthorization, lease.id);
        await challenges.caughtUp(revision);
      },
      challengeRemoveFn: async (_authz, challenge) => {
        await removeChallenge(store, challenge.token);
      },
    });
    return { chain, key: key.toString() };
  }

  private async writeStatus(status: AcmeStatus): Promise<void> {
    await writeAcmeStatus(this.options.store, status);
  }

  private async journal(host: string, kind: string, message: string): Promise<void> {
    // The host's first label is its service (or component) name: the service page shows the line.
    await appendJournal(this.options.store, { kind, message, service: host.slice(0, host.indexOf('.')) }).catch((error: unknown) =>
      this.options.log.error({ err: error, host }, 'could not journal a certificate event'),
    );
  }
}

function entryOf(record: CertificateRecord): CertificateEntry {
  return { ...record, notBefore: Date.parse(record.notBefore), notAfter: Date.parse(record.notAfter) };
}

/** The ACME server's reason (acme-client puts the problem document's detail in the message), bounded. */
function reasonOf(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return message.length > MAX_REASON_LENGTH ? `${message.slice(0, MAX_REASON_LENGTH)}…` : message;
}
