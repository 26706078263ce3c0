import { createHash } from 'node:crypto';
import type { Deployment } from '../schemas/release.js';
import type { UnitStatus } from '../schemas/cluster.js';
import type { NotificationEvent, NotifyEndpoint, NotifyEventName } from '../schemas/notification.js';
import { compileServiceGlob } from '../service-glob.js';

// The events receivers get, made from what caused them. An event's id is derived from its cause
// (a deployment and the state it reached; a unit status and the store revision it turned failed
// at; a machine and the revision its registration ended at), never drawn at random: a scheduler
// that takes over and sees the same cause makes the same id, so the outbox (keyed by it) and the
// receiver (deduplicating by it) see one event however many schedulers noticed it.

/** 128 bits of the SHA-256 of the cause's parts, in hex. */
export function eventId(event: NotifyEventName, ...cause: (string | number)[]): string {
  return createHash('sha256').update([event, ...cause].join('\n')).digest('hex').slice(0, 32);
}

/** Slack reads `&`, `<` and `>` as markup: escaped as its docs ask, so a reason shows as written. */
const slackEscape = (text: string): string => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

type DeploymentEventState = 'started' | 'succeeded' | 'failed' | 'reverted' | 'superseded';

const deploymentText: Record<DeploymentEventState, (d: Pick<Deployment, 'release' | 'image' | 'trigger'>, reason: string) => string> = {
  started: (d) => `deploying v${d.release} (${d.trigger}): ${d.image}`,
  succeeded: (d) => `v${d.release} deployed: ${d.image}`,
  failed: (d, reason) => `deployment of v${d.release} failed: ${reason}`,
  reverted: (d, reason) => `deployment of v${d.release} failed and is reverted: ${reason}`,
  superseded: (d, reason) => `deployment of v${d.release} superseded: ${reason}`,
};

/** The event of a deployment reaching `state` (`started`: it was recorded). */
export function deploymentEvent(deployment: Pick<Deployment, 'id' | 'service' | 'release' | 'image' | 'trigger'>, state: DeploymentEventState, at: string, reason = ''): NotificationEvent {
  const event = `deployment.${state}` as const;
  return {
    id: eventId(event, deployment.id),
    event,
    service: deployment.service,
    timestamp: at,
    details: { deployment: deployment.id, release: deployment.release, image: deployment.image, trigger: deployment.trigger, ...(reason ? { reason } : {}) },
    text: slackEscape(`${deployment.service}: ${deploymentText[state](deployment, reason)}`),
  };
}

/**
 * A unit slot's status turned failed. `episode` is what the id is made from: the failure episode
 * the agent names (`failingSince`), so a scheduler that starts while the unit is still failing
 * makes the id it was told under, if it was; or, from an agent that names none, the store
 * revision of the write that turned it failed (failureEpisode).
 */
/** What a unit failure's event id is made from: the agent's episode, else the write's revision. */
export const failureEpisode = (status: UnitStatus, revision: number): string | number => status.failingSince ?? revision;

export function unitFailedEvent(status: UnitStatus, episode: string | number): NotificationEvent {
  const why = status.error ?? `${status.active}/${status.sub}`;
  return {
    id: eventId('unit.failed', status.machine, status.unit, status.spec, episode),
    event: 'unit.failed',
    service: status.service,
    timestamp: status.updatedAt,
    details: {
      unit: status.unit,
      machine: status.machine,
      release: status.release,
      image: status.image,
      restarts: status.restarts,
      ...(status.errorKind ? { errorKind: status.errorKind } : {}),
      ...(status.error ? { error: status.error } : {}),
    },
    text: slackEscape(`${status.service}: unit ${status.unit} failed on ${status.machine}: ${why}`),
  };
}

/** A machine's registration ended (its lease expired or its agent stopped) at store revision `revision`. */
export function machineLostEvent(machine: string, revision: number, services: readonly string[], at: string): NotificationEvent {
  const sorted = [...new Set(services)].sort();
  return {
    id: eventId('machine.lost', machine, revision),
    event: 'machine.lost',
    service: null,
    timestamp: at,
    details: { machine, services: sorted },
    text: slackEscape(`machine ${machine} lost${sorted.length ? `; it ran units of ${sorted.join(', ')}` : ''}`),
  };
}

/** What a failed scheduled run's event tells: the run, its tick and why it failed. */
export interface ScheduledRunFailure {
  service: string;
  run: string;
  tick: string;
  release: number;
  /** `exited with code 3`, `timed out after 600 s`, `could not run: …`. */
  reason: string;
  exitCode?: number | undefined;
  at: string;
}

/** A scheduled run failed (non-zero exit, timeout, or it could not run): one event per run, its id from the run's. */
export function jobFailedEvent(failure: ScheduledRunFailure): NotificationEvent {
  return {
    id: eventId('job.failed', failure.run),
    event: 'job.failed',
    service: failure.service,
    timestamp: failure.at,
    details: { job: failure.run, tick: failure.tick, release: failure.release, reason: failure.reason, ...(failure.exitCode !== undefined ? { exitCode: failure.exitCode } : {}) },
    text: slackEscape(`${failure.service}: scheduled run ${failure.run} (tick ${failure.tick}, v${failure.release}) failed: ${failure.reason}`),
  };
}

/**
 * Whether the endpoint takes the event: one of its events (all when it names none), and a service
 * its glob matches (all when it has none); a machine's event matches through the services that ran
 * there.
 */
export function endpointWants(endpoint: Pick<NotifyEndpoint, 'events' | 'services'>, event: NotificationEvent): boolean {
  if (endpoint.events && !endpoint.events.includes(event.event)) return false;
  if (endpoint.services === undefined) return true;
  const matches = compileServiceGlob(endpoint.services);
  const services = event.service !== null ? [event.service] : Array.isArray(event.details.services) ? event.details.services : [];
  return services.some(matches);
}
