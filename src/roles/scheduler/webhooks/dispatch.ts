import type { FastifyBaseLogger } from 'fastify';
import type { Store } from '../../../store/store.js';
import { servicePrefix } from '../../../store/keys.js';
import { listRecords } from '../../../store/json-records.js';
import type { Service } from '../../../schemas/service.js';
import type { DeployReply } from '../../../schemas/release.js';
import type { WebhookPushOutcome, WebhookReply, WebhookServiceOutcome } from '../../../schemas/webhooks.js';
import { staleReason, triggerTime, type DeployTrigger } from '../deploys/deploy.js';
import { listReleases } from '../../../store/records/releases.js';
import { appendJournal } from '../../../store/records/journal.js';
import { describeImage, matchPush, type Match, type Push } from './matching.js';
import type { DeliveryLog } from './deliveries.js';

// What every hook does once it has authenticated and parsed its payload into pushes: match them
// against the declared services, drop repeated deliveries, journal pushes to `autoDeploy: never`
// services, and start deploys in the background, so the sender is answered at once (registries
// time out and retry; GitHub gives up after 10 s).

/** The part of the Scheduler the hooks use (a follower hands the deploy to the leader). */
export interface Deployer {
  deploy(trigger: DeployTrigger): Promise<DeployReply>;
}

export interface Dispatch {
  deployer: Deployer;
  /**
   * The store itself, not the scheduler's leader-fenced view: any scheduler, leader or not, may
   * read declarations, record deliveries and journal pushes.
   */
  store: Store;
  deliveries: DeliveryLog;
  log: FastifyBaseLogger;
}

const outcome = (match: Match): WebhookServiceOutcome => ({
  service: match.service,
  action: match.action === 'deploy' ? 'deploying' : match.action === 'record' ? 'recorded' : 'skipped',
  reason: match.reason,
});

function deployInBackground({ deployer, store, deliveries, log }: Dispatch, push: Push, service: string): void {
  const image = describeImage(push.image);
  const trigger: DeployTrigger = { serviceName: service, containerRepository: image, pushedAt: push.pushedAt, triggeredAt: triggerTime(push.pushedAt), trigger: push.hook };
  deployer.deploy(trigger).then(
    (reply) => log.info({ hook: push.hook, service, image, outcome: reply.outcome, deployment: reply.deployment }, reply.message),
    async (error: Error) => {
      log.warn({ hook: push.hook, service, image, err: error }, 'deploying a pushed image failed');
      // The sender was answered 2xx and will not retry; a manual redelivery of the same id may.
      if (push.event !== undefined) await deliveries.forget(push.hook, push.event).catch(() => undefined);
      await appendJournal(store, { service, kind: 'webhook.deploy-failed', message: `${push.hook} push of ${image} was not deployed: ${error.message}` }).catch(() => undefined);
    },
  );
}

async function handlePush(dispatch: Dispatch, push: Push, services: Service[]): Promise<WebhookPushOutcome> {
  const image = describeImage(push.image);
  const stale = new Map<string, string>();
  const matches = await Promise.all(
    matchPush(push, services).map(async (match) => {
      const reason = match.action === 'deploy' ? await staleness(dispatch.store, services.find((s) => s.name === match.service)!, push) : undefined;
      if (reason) stale.set(match.service, reason);
      return reason ? { ...match, action: 'skip' as const, reason: `stale: ${reason}` } : match;
    }),
  );
  const result = { event: push.event ?? '', image, duplicate: false, services: matches.map(outcome) };
  // Nothing to deploy or journal: nothing to remember of the delivery either.
  if (!matches.some((match) => match.action !== 'skip') && stale.size === 0) return result;
  if (push.event !== undefined && !(await dispatch.deliveries.claim(push.hook, push.event))) {
    return { ...result, duplicate: true, services: matches.map((match) => ({ service: match.service, action: 'skipped' as const, reason: 'a repeated delivery: already handled' })) };
  }
  try {
    for (const match of matches.filter((m) => m.action === 'record')) {
      await appendJournal(dispatch.store, { service: match.service, kind: 'webhook.push-recorded', message: `${push.hook} push of ${image} not deployed: autoDeploy is never` });
    }
    for (const [service, reason] of stale) {
      await appendJournal(dispatch.store, { service, kind: 'deployment.stale', message: `${push.hook} push of ${image} deploys nothing: ${reason}` });
    }
  } catch (error) {
    // Nothing was done: let the sender's retry try again.
    if (push.event !== undefined) await dispatch.deliveries.forget(push.hook, push.event).catch(() => undefined);
    throw error;
  }
  // Started in event order, so the scheduler accepts a service's pushes in the order they happened.
  for (const match of matches.filter((m) => m.action === 'deploy')) deployInBackground(dispatch, push, match.service);
  return result;
}

/**
 * Why the push is stale for the service (see deploy.ts), answered before the sender is: a late
 * delivery is told it deployed nothing. The scheduler checks again when it accepts the deploy.
 */
async function staleness(store: Store, service: Service, push: Push): Promise<string | undefined> {
  return staleReason(service, await listReleases(store, service), triggerTime(push.pushedAt));
}

function describeOutcome(push: WebhookPushOutcome): string {
  if (push.duplicate) return `${push.image}: a repeated delivery, already handled`;
  if (push.services.length === 0) return `${push.image}: no declared service uses this repository`;
  return `${push.image}: ${push.services.map((s) => (s.action === 'deploying' ? `deploying ${s.service}` : s.action === 'recorded' ? `recorded for ${s.service} (autoDeploy never)` : `${s.service} skipped (${s.reason})`)).join(', ')}`;
}

/** Handles the pushes of one delivery; `ignored` counts the events that are not manifest pushes. */
export async function dispatchPushes(dispatch: Dispatch, pushes: Push[], ignored: number, nothingToDo?: string): Promise<WebhookReply> {
  if (pushes.length === 0) {
    return { statusCode: 200, message: nothingToDo ?? `nothing to deploy: ${ignored} event(s), none a pushed manifest`, pushes: [], ignored };
  }
  const services = await listRecords<Service>(dispatch.store, servicePrefix);
  const outcomes: WebhookPushOutcome[] = [];
  for (const push of pushes) outcomes.push(await handlePush(dispatch, push, services));
  const deploying = outcomes.some((push) => push.services.some((s) => s.action === 'deploying'));
  return { statusCode: deploying ? 202 : 200, message: outcomes.map(describeOutcome).join('; '), pushes: outcomes, ignored };
}

/** What each hook's routes receive. */
export interface HookContext {
  dispatch: Dispatch;
  /** The scheduler listens on a loopback address only. */
  listenerLoopback: boolean;
  /** Largest accepted body, in bytes (413 above). */
  bodyLimit: number;
}
