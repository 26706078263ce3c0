import type { Store } from '../../../store/store.js';
import { endEpisode, listDeployments } from '../../../store/records/deployments.js';
import { getRelease } from '../../../store/records/releases.js';
import { endLostJob, listJobViews } from '../../../store/records/jobs.js';
import { finishedJobStates } from '../../../schemas/job.js';
import { currentTarget, type Deployment, type Release } from '../../../schemas/release.js';
import { keepsUnitsWithVolumes, unitsWanted } from '../../../schemas/service.js';
import type { ClusterSnapshot, ClusterWatch } from '../cluster-snapshot.js';
import { planHealing, type Reschedule } from './healing.js';
import { conditionsOf, decideHeal, endedEpisodes, openEpisode } from './healing-backoff.js';
import { VanishedMachines } from './vanished-machines.js';

// The leader's heal pass: the pure plan (healing.ts) from the snapshot and the deployments, each
// planned service rescheduled when its backoff lets it (healing-backoff.ts), and the jobs of lost
// machines ended (a job is not moved: it ran once, somewhere, and its caller is told it failed). The scheduler runs it
// on its work queue and keeps what depends on its leadership and the store's health: which
// missing machines are still renewing.

/** What healing asks of the deployment runner (deploys/runner.ts). */
export interface Rescheduler {
  /** Work for the service is queued or running: it converges on its target already. */
  busy(service: string): boolean;
  /** A reschedule of the release: a new one, or again the failed one of an episode. */
  reschedule(release: Release, why: string, retry: { episode?: Deployment; retryDelayMs: number }): Promise<void>;
  /** Carries on the deployments in flight (of `listed`, newest first) that no rollout runs. */
  resumeOrphans(listed: readonly Deployment[]): Promise<void>;
}

export interface HealerOptions {
  /** The leader-fenced store. */
  store: Store;
  cluster: ClusterWatch;
  runner: Rescheduler;
  /** Of the machines `holding` units or jobs (default: those holding assignments), those not registered and not lost yet (the renewal grace). */
  renewing: (snapshot: ClusterSnapshot, holding?: readonly string[]) => Set<string>;
  /** Until then (ms) machines that have not registered again count as in place: failure episodes go on. */
  renewalGraceUntil: () => number;
}

export class Healer {
  /** When the last completed pass took its snapshot (ms), for /readyz. */
  healedAt = 0;
  /** Per service: what could make its reschedule succeed, as its last attempt saw it (healing-backoff.ts conditionsOf). */
  private readonly conditionsAtAttempt = new Map<string, string>();
  /** When a pass must look for jobs of lost machines. */
  private readonly vanished = new VanishedMachines();

  constructor(private readonly options: HealerOptions) {}

  /** A new leadership: the conditions of the last leader's attempts are not known. */
  forgetAttempts(): void {
    this.conditionsAtAttempt.clear();
    this.vanished.forget();
  }

  /** A machine registered (the cluster watch): once it is gone, a pass looks for its jobs. */
  sawMachine(machine: string): void {
    this.vanished.saw(machine);
  }

  /** Applies the self-healing plan: a `reschedule` deployment of the current release per service that lost units. */
  async pass(): Promise<void> {
    const { store, cluster, runner } = this.options;
    const planned = Date.now();
    const snapshot = cluster.snapshot();
    const deployments = await listDeployments(store);
    // A service whose deployment is in flight is the rollout's to converge, not healing's: one
    // left without a rollout is carried on first, so it does not stay in flight for ever.
    await runner.resumeOrphans(deployments);
    const declared = new Set(snapshot.services.map((service) => service.name));
    const instances = new Map<string, number>();
    const staying = new Set<string>();
    for (const service of declared) {
      const target = currentTarget(deployments.filter((d) => d.service === service));
      const release = target?.state === 'succeeded' && !runner.busy(service) ? await getRelease(store, service, target.release) : undefined;
      if (release) instances.set(`${service}/${release.version}`, unitsWanted(release.config));
      if (release && keepsUnitsWithVolumes(release.config)) staying.add(`${service}/${release.version}`);
    }
    const plan = planHealing({
      ...snapshot,
      deployments,
      declared,
      busy: (service) => runner.busy(service),
      instancesOf: (service, release) => instances.get(`${service}/${release}`),
      keepsVolumes: (service, release) => staying.has(`${service}/${release}`),
      renewing: this.options.renewing(snapshot),
      away: new Set((snapshot.away ?? []).map((away) => away.machine)),
    });
    await this.rescheduleWithBackoff(plan, deployments, snapshot);
    await this.endJobsOfLostMachines(snapshot);
    this.healedAt = planned;
  }

  /**
   * A job on a lost machine ends `failed` naming it: nothing else would end it (its agent reports
   * a job's end), so its caller, the deploy waiting on its release command and a schedule's
   * `forbid` would wait out its timeout. A machine still renewing (the grace) or away (its engine
   * unreachable, its agent alive) keeps its jobs. The jobs are listed only when a machine may have
   * been lost since the last look (vanished-machines.ts).
   */
  private async endJobsOfLostMachines(snapshot: ClusterSnapshot): Promise<void> {
    const present = new Set([...snapshot.machines.map((machine) => machine.id), ...(snapshot.away ?? []).map((away) => away.machine)]);
    const now = Date.now();
    if (!this.vanished.mustLook(present, now)) return;
    const unfinished = (await listJobViews(this.options.store)).filter((job) => !finishedJobStates.has(job.state));
    const renewing = this.options.renewing(snapshot, unfinished.map((job) => job.machine));
    /** Whether every job of a missing machine was ended (none waits on a machine still renewing). */
    let settled = true;
    for (const job of unfinished) {
      if (present.has(job.machine)) continue;
      if (renewing.has(job.machine)) settled = false;
      else await endLostJob(this.options.store, job.id, `its machine ${job.machine} was lost`);
    }
    this.vanished.looked(present, settled, now);
  }

  /**
   * Ends the failure episodes that are over, and reschedules each planned service whose backoff
   * lets it (healing-backoff.ts): at once unless its last reschedule failed, then after the wait,
   * or sooner when its machines or its declaration changed.
   */
  private async rescheduleWithBackoff(plan: Reschedule[], deployments: Deployment[], snapshot: ClusterSnapshot): Promise<void> {
    const { store, cluster, runner } = this.options;
    const planned = new Set(plan.map((item) => item.service));
    // Not while machines that have not registered again count as in place: their episodes go on.
    const ended = Date.now() < this.options.renewalGraceUntil() ? [] : endedEpisodes(deployments, (service) => planned.has(service));
    for (const { episode, why } of ended) await endEpisode(store, episode, why);
    for (const { service, release, why } of plan) {
      const conditions = conditionsOf(snapshot, cluster.declaration(service)?.modRevision);
      const seen = this.conditionsAtAttempt.get(service);
      const episode = openEpisode(deployments.filter((d) => d.service === service), release);
      const decision = decideHeal(episode, Date.now(), seen !== undefined && seen !== conditions);
      // A new leader has not seen the conditions of the last attempt: from now on it compares with these.
      if (decision.attempt || seen === undefined) this.conditionsAtAttempt.set(service, conditions);
      if (!decision.attempt) continue;
      const found = await getRelease(store, service, release);
      if (found) await runner.reschedule(found, why, decision);
    }
  }
}
