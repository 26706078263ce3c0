import { currentTarget, type Deployment, type Release } from '../../../schemas/release.js';
import { isFinished } from '../../../schemas/states.js';
import { isInFlight } from '../../../store/records/deployments.js';

// How much history the scheduler keeps. Deployment records and journal entries are written on
// every deploy, reschedule and stop, and nothing else removes them; left alone they would grow
// the store without bound (etcd refuses writes once its space quota is reached). The leader
// deletes the oldest beyond the limits (`RetentionLimits`, src/config.ts). Pure: the store I/O is in
// housekeeping.ts.

/**
 * The ids of the deployments to delete, from records listed newest first. Kept besides the newest
 * `keep` finished ones of each service: every deployment not finished, and the newest succeeded
 * one, whatever a later deploy does: it is what the service runs once deploys in flight end (see
 * `currentTarget`), what a failed deploy reverts to, or a `stop` after which the service runs
 * nothing (deleting it would make the release before it current again).
 *
 * Healing's records (trigger `reschedule`) are counted apart, `keep` of them too: however often
 * the platform moves a service's units, the deployments people made stay in its history.
 */
export function expiredDeployments(deployments: readonly Deployment[], keep: number): string[] {
  const byService = new Map<string, Deployment[]>();
  for (const deployment of deployments) {
    const list = byService.get(deployment.service) ?? [];
    list.push(deployment);
    byService.set(deployment.service, list);
  }
  const expired: string[] = [];
  for (const list of byService.values()) {
    const lastSucceeded = list.find((d) => d.state === 'succeeded');
    const finished = { healing: 0, other: 0 };
    for (const deployment of list) {
      if (!isFinished(deployment) || deployment === lastSucceeded) continue;
      const kind = deployment.trigger === 'reschedule' ? 'healing' : 'other';
      finished[kind] += 1;
      if (finished[kind] > keep) expired.push(deployment.id);
    }
  }
  return expired;
}

/** The journal keys to delete, from keys in ascending (oldest first) order. */
export const expiredJournalKeys = (keys: readonly string[], keep: number): string[] => keys.slice(0, Math.max(0, keys.length - keep));

/**
 * The versions of one service's releases to delete (releases listed oldest first, the service's
 * deployments newest first): all but the newest `keep`, never one a deployment in flight uses,
 * the one the service runs (its current target) or its last success (what a failure reverts to).
 */
export function expiredReleases(releases: readonly Release[], deployments: readonly Deployment[], keep: number): number[] {
  const used = new Set(deployments.filter(isInFlight).map((d) => d.release));
  const target = currentTarget([...deployments]);
  const lastSucceeded = deployments.find((d) => d.state === 'succeeded' && d.trigger !== 'stop');
  for (const deployment of [target, lastSucceeded]) if (deployment) used.add(deployment.release);
  return releases.slice(0, Math.max(0, releases.length - keep)).map((r) => r.version).filter((version) => !used.has(version));
}
