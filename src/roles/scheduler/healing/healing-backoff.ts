import type { Deployment } from '../../../schemas/release.js';
import type { ClusterSnapshot } from '../cluster-snapshot.js';

// Backoff of self-healing, planned purely (the leader applies it in scheduler.ts). A service whose
// units cannot be placed (its only machine lost its Docker engine, say) would otherwise fail a
// `reschedule` deployment at every healing check, notify each time and push the user's own
// deployments out of the retained history.
//
// Consecutive failed reschedules of a service are one failure episode, kept in one deployment
// record: the first failed reschedule. Healing tries that record again (its `attempts` counts the
// tries, its `reason` says the last error) when its `retryAt` has come, the wait doubling from the
// healing check interval up to a cap, or at once, with the wait back at the start, when something
// changed that could make it succeed: a machine came, went, got or lost its engine, was drained,
// or the service's declaration changed. A new deployment of the service, by the user or by
// healing after the units were whole again, ends the episode. The state lives in the record, so a
// new leader carries on the backoff instead of starting the storm again.

export interface BackoffLimits {
  /** The first wait after a failure, and the wait after a change: the healing check interval. */
  firstMs: number;
  /** The longest wait. */
  maxMs: number;
}

/** Waits of healing: doubling from 10 s (the check interval) up to 5 minutes. */
export const defaultBackoff: BackoffLimits = { firstMs: 10_000, maxMs: 300_000 };

/** The service's open failure episode: its newest record is a failed reschedule of `release` that is to be tried again. */
export function openEpisode(deployments: readonly Deployment[], release: number): Deployment | undefined {
  const newest = deployments[0];
  return newest && isOpenEpisode(newest) && newest.release === release ? newest : undefined;
}

const isOpenEpisode = (deployment: Deployment): boolean => deployment.trigger === 'reschedule' && deployment.state === 'failed' && deployment.retryAt !== undefined;

export type HealDecision =
  /** Try now; `retryDelayMs`: how long to wait after this attempt if it fails too. */
  | { attempt: true; episode?: Deployment; retryDelayMs: number }
  | { attempt: false; dueAt: number };

/**
 * Whether healing tries the service now. `episode`: its open episode, if any; `changed`: whether
 * what the last attempt saw (conditionsOf) has changed since, false when not known (a new leader).
 */
export function decideHeal(episode: Deployment | undefined, now: number, changed: boolean, limits: BackoffLimits = defaultBackoff): HealDecision {
  if (!episode) return { attempt: true, retryDelayMs: limits.firstMs };
  if (changed) return { attempt: true, episode, retryDelayMs: limits.firstMs };
  const dueAt = Date.parse(episode.retryAt!);
  if (now < dueAt) return { attempt: false, dueAt };
  const lastWait = dueAt - Date.parse(episode.finishedAt ?? episode.updatedAt);
  return { attempt: true, episode, retryDelayMs: Math.min(limits.maxMs, Math.max(limits.firstMs, 2 * lastWait)) };
}

/**
 * Open episodes that are over, from records listed newest first: the service's newest record is
 * something else now (a deployment by the user), or healing no longer plans to place its units
 * (`planned` is false: they run again). Their `retryAt` goes; the record stays as history.
 */
export function endedEpisodes(deployments: readonly Deployment[], planned: (service: string) => boolean): { episode: Deployment; why: string }[] {
  const newest = new Map<string, Deployment>();
  for (const deployment of deployments) if (!newest.has(deployment.service)) newest.set(deployment.service, deployment);
  return deployments
    .filter(isOpenEpisode)
    .flatMap((episode) => (newest.get(episode.service) !== episode ? [{ episode, why: 'a newer deployment came' }] : planned(episode.service) ? [] : [{ episode, why: 'its units are in place' }]));
}

/**
 * What could make a failed reschedule of the service succeed if it changed: the machines, whether
 * each has its engine and is drained, and the service's declaration (by its store revision).
 */
export function conditionsOf(snapshot: Pick<ClusterSnapshot, 'machines' | 'drained'>, declarationRevision: number | undefined): string {
  const machines = snapshot.machines.map((m) => `${m.id}:${m.docker.reachable ? 'engine' : 'none'}${snapshot.drained.has(m.id) ? ':drained' : ''}`).sort();
  return `${machines.join(',')}|${declarationRevision ?? '-'}`;
}
