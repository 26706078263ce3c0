import type { FastifyBaseLogger } from 'fastify';
import type { Store } from '../../../store/store.js';
import { journalPrefix, releasesRoot, servicePrefix } from '../../../store/keys.js';
import { deleteAssignments } from '../../../store/records/assignments.js';
import { deleteReleases, deleteUndeclaredReleases } from '../../../store/records/releases.js';
import { readService } from '../../../store/records/services.js';
import { deleteUndeclaredUnitOutputs, servicesWithUnitOutput } from '../../../store/records/unit-outputs.js';
import { deleteEndedRequestHolds } from '../../../store/records/request-holds.js';
import { deleteKeys, listRecords } from '../../../store/json-records.js';
import type { Assignment } from '../../../schemas/cluster.js';
import type { Release } from '../../../schemas/release.js';
import type { Service } from '../../../schemas/service.js';
import type { RetentionLimits } from '../../../config.js';
import { FencedWriteError } from '../../../store/fenced-store.js';
import { NotLeaderError } from '../leadership.js';
import { deleteDeployments, listDeployments } from '../../../store/records/deployments.js';
import { expiredDeployments, expiredJournalKeys, expiredReleases } from './retention.js';
import { hostCertificateStates, leftByDeletedServices, removeLeftBehind } from '../../../certificates/certificate-records.js';
import type { ClusterSnapshot } from '../cluster-snapshot.js';
import { WorkQueue } from '../../../work-queue.js';

// What the leader cleans up, apart from deploying: assignments of services no longer declared
// (their units stop), the releases of deleted services (a service declared again under the name
// starts a history of its own), the ACME certificates and order state of their public hosts (a
// service declared again is ordered a certificate of its own; the gateways stop serving the old
// one), the output kept of their failed units, and history beyond the retention limits. Level-triggered: each
// pass compares the whole store with the declarations, so a missed event costs nothing.

export class Housekeeping {
  /** Pruning passes, one at a time: one asked for while one runs runs once more after it. */
  private readonly history = new WorkQueue({
    run: () => this.pass(),
    onError: (error) => {
      if (!(error instanceof FencedWriteError || error instanceof NotLeaderError)) this.log.warn({ err: error }, 'pruning history failed; retrying at the next check');
    },
  });

  constructor(
    private readonly store: Store,
    private readonly retention: RetentionLimits,
    private readonly log: FastifyBaseLogger,
  ) {}

  /** Units of services that are not declared: their assignments go, and their agents stop them. */
  async pruneOrphans(snapshot: Pick<ClusterSnapshot, 'assignments' | 'services'>): Promise<void> {
    const declared = new Set(snapshot.services.map((service) => service.name));
    const doomed = snapshot.assignments.filter((assignment: Assignment) => !declared.has(assignment.service));
    await deleteAssignments(this.store, doomed);
  }

  /** One full pass; resolves once a pass that started after the call has ended. */
  pruneHistory(): Promise<void> {
    return this.history.add('history');
  }

  /** Starts no more passes and waits for the one running. */
  close(): Promise<void> {
    return this.history.close();
  }

  private async pass(): Promise<void> {
    const [deployments, journal, releases, services] = await Promise.all([
      listDeployments(this.store),
      this.store.list(journalPrefix),
      listRecords<Release>(this.store, releasesRoot),
      listRecords<Service>(this.store, servicePrefix),
    ]);
    const declared = new Map(services.map((service) => [service.name, service]));
    const expired = expiredDeployments(deployments, this.retention.deploymentsPerService);
    await deleteDeployments(this.store, expired);
    const journalKeys = expiredJournalKeys(journal.map((kv) => kv.key), this.retention.journalEntries);
    await deleteKeys(this.store, journalKeys);
    const doomed = [...expired, ...journalKeys];
    const releasesDeleted = await this.pruneReleases(releases, declared, deployments);
    await this.pruneCertificates(new Set(declared.keys()));
    await this.pruneUnitOutputs(new Set(declared.keys()));
    // Gateways ignore a hold past its end already; this only keeps the store from collecting them.
    await deleteEndedRequestHolds(this.store);
    if (doomed.length + releasesDeleted > 0) this.log.info({ deleted: doomed.length + releasesDeleted }, 'deleted history beyond the retention limits and of deleted services');
  }

  /** The failed units' output kept for deleted services (only while each is still undeclared). */
  private async pruneUnitOutputs(declared: ReadonlySet<string>): Promise<void> {
    for (const name of await servicesWithUnitOutput(this.store)) {
      if (!declared.has(name)) await deleteUndeclaredUnitOutputs(this.store, name);
    }
  }

  /** What deleted services left of HTTPS; certificate-records.ts decides what that is and removes it. */
  private async pruneCertificates(declared: ReadonlySet<string>): Promise<void> {
    for (const left of leftByDeletedServices(await hostCertificateStates(this.store), declared)) {
      if ((await removeLeftBehind(this.store, left)) && left.certificateRevision !== undefined) this.log.info({ host: left.host, service: left.service }, 'removed the ACME certificate of a deleted service');
    }
  }

  /**
   * Per service name: the releases of a deleted service (all of them, only while it is still not
   * declared), of a predecessor of the declared one, and those beyond the retention limit.
   */
  private async pruneReleases(releases: Release[], declared: Map<string, Service>, deployments: Awaited<ReturnType<typeof listDeployments>>): Promise<number> {
    const byService = new Map<string, Release[]>();
    for (const release of releases) byService.set(release.service, [...(byService.get(release.service) ?? []), release]);
    let deleted = 0;
    for (const [name, list] of byService) {
      let service = declared.get(name);
      if (!service) {
        // Only while it is still undeclared: a declaration made meanwhile keeps what it claimed.
        if (await deleteUndeclaredReleases(this.store, name)) {
          deleted += list.length;
          continue;
        }
        // Declared again since the list was read (nothing else triggers a pass for that): the
        // releases listed belong to its predecessor unless they carry its uuid.
        service = (await readService(this.store, name))?.record;
        if (!service) continue;
      }
      const foreign = list.filter((r) => r.serviceUuid !== undefined && r.serviceUuid !== service.uuid).map((r) => r.version);
      const own = list.filter((r) => !foreign.includes(r.version));
      const expired = expiredReleases(own, deployments.filter((d) => d.service === name), this.retention.releasesPerService);
      const versions = [...foreign, ...expired];
      await deleteReleases(this.store, name, versions);
      deleted += versions.length;
    }
    return deleted;
  }
}
