import type { Store } from '../../../store/store.js';
import type { PrefixCache } from '../../../store/prefix-cache.js';
import { readService } from '../../../store/records/services.js';
import { badRequest, notFound } from '../../../http/errors.js';
import { formatImageReference, parseImageReference, repositoryName } from '../../../image-reference.js';
import { unitsWanted, type Service, type ServiceConfig } from '../../../schemas/service.js';
import { currentTarget, type Deployment, type DeployReply, type Release } from '../../../schemas/release.js';
import type { RegistryClient } from './registry-client.js';
import { claimReleases, createRelease, getRelease } from '../../../store/records/releases.js';
import { deploymentStart, deploymentWritten, newDeploymentId, serviceDeployments } from '../../../store/records/deployments.js';
import { appendJournal } from '../../../store/records/journal.js';

// Accepting a trigger: validate it, drop it when stale, pin the image to its digest, and record a
// release and its pending deployment. The runner then rolls it out.

export interface DeployTrigger {
  serviceName: string;
  containerRepository: string;
  /** Unix seconds the sender gave (0: none). */
  pushedAt: number;
  /** The time the trigger stands for, in Unix milliseconds (see Release.triggeredAt). */
  triggeredAt: number;
  /** What caused it: manual, registry, dockerhub, github. */
  trigger: string;
}

/** How far in the future a trigger's time may be (clocks differ a little between machines). */
export const MAX_CLOCK_AHEAD_MS = 5 * 60_000;

/** The time a deploy request stands for: the push it names, or now when it names none (pushedAt 0). */
export const triggerTime = (pushedAt: number, receivedAt = Date.now()): number => (pushedAt > 0 ? pushedAt * 1000 : receivedAt);

/** Refuses a push time (Unix seconds) from the future: it would make every later push look stale. */
export function assertNotFuture(field: string, seconds: number): void {
  const now = Math.floor(Date.now() / 1000);
  if (seconds > now + MAX_CLOCK_AHEAD_MS / 1000) {
    throw badRequest(`${field} must not be more than ${MAX_CLOCK_AHEAD_MS / 60_000} minutes in the future: it is ${seconds}, the scheduler's clock says ${now} (Unix seconds)`);
  }
}

/** A trigger the scheduler accepted: a new release and deployment to roll out, or nothing to do. */
export interface AcceptedDeploy {
  reply: DeployReply;
  release?: Release;
  deployment?: Deployment;
}

interface ReleaseDraft {
  image: string;
  digest: string;
  tag?: string;
  config: ServiceConfig;
  pushedAt: number;
  triggeredAt: number;
  trigger: string;
  rollbackOf?: number;
  /** A rollback that runs the release's releaseCommand again (`--run-release-command`). */
  runReleaseCommand?: boolean;
}

async function declaredService(store: Store, name: string): Promise<Service> {
  const found = await readService(store, name);
  if (!found) throw notFound(`service ${name} is not declared`);
  return found.record;
}

/**
 * Why a trigger of `triggeredAt` is stale for the service, or undefined when it is not: it is
 * older than the service's declaration (a push meant for a predecessor of the name, delivered
 * late) or than the trigger of the service's newest release (registries deliver queued events
 * late, in order: an old push must not override a newer deploy).
 */
export function staleReason(service: Service, releases: Release[], triggeredAt: number): string | undefined {
  // Senders give whole seconds: only a trigger a whole second older counts as older.
  const second = (ms: number): number => Math.floor(ms / 1000);
  const at = new Date(triggeredAt).toISOString();
  if (second(triggeredAt) < second(Date.parse(service.createdAt))) return `the trigger (${at}) is older than the declaration of ${service.name} (${service.createdAt})`;
  const newest = releases.reduce<Release | undefined>((found, r) => (!found || timeOf(r) > timeOf(found) ? r : found), undefined);
  if (newest && second(triggeredAt) < second(timeOf(newest))) return `the trigger (${at}) is older than the one v${newest.version} was deployed for (${new Date(timeOf(newest)).toISOString()})`;
  return undefined;
}

const timeOf = (release: Release): number => release.triggeredAt ?? release.pushedAt * 1000;

/** Where a trigger is accepted: the leader's store, and its watched copy of the deployment records (records/deployments.ts). */
export interface DeployRecords {
  store: Store;
  deployments: PrefixCache;
}

/** Validates a trigger and pins the image to its digest; the release gets the service's next config. */
export async function acceptDeploy({ store, deployments }: DeployRecords, registry: RegistryClient, trigger: DeployTrigger): Promise<AcceptedDeploy> {
  assertNotFuture('pushedAt', trigger.pushedAt);
  const service = await declaredService(store, trigger.serviceName);
  const requested = parseImageReference(trigger.containerRepository);
  const declared = parseImageReference(service.containerImage);
  if (repositoryName(requested) !== repositoryName(declared)) {
    throw badRequest(`containerRepository ${trigger.containerRepository} is not the repository of service ${service.name} (${service.containerImage})`);
  }
  const target = { ...requested, tag: requested.tag ?? (requested.digest ? undefined : declared.tag) };
  const digest = await registry.resolveDigest(target);
  return recordRelease({ store, deployments }, service, {
    image: formatImageReference({ ...target, digest }),
    digest,
    ...(target.tag ? { tag: target.tag } : {}),
    config: service.config,
    pushedAt: trigger.pushedAt,
    triggeredAt: trigger.triggeredAt,
    trigger: trigger.trigger,
  });
}

/** Deploys an earlier release's digest and config as a new release that records where it came from. */
export async function acceptRollback({ store, deployments }: DeployRecords, serviceName: string, version: number, runReleaseCommand = false): Promise<AcceptedDeploy> {
  const service = await declaredService(store, serviceName);
  const earlier = await getRelease(store, service, version);
  if (!earlier) throw notFound(`service ${serviceName} has no release v${version}`);
  return recordRelease({ store, deployments }, service, {
    image: earlier.image,
    digest: earlier.digest,
    ...(earlier.tag ? { tag: earlier.tag } : {}),
    config: earlier.config,
    pushedAt: 0,
    triggeredAt: Date.now(),
    trigger: 'rollback',
    rollbackOf: earlier.version,
    ...(runReleaseCommand ? { runReleaseCommand } : {}),
  });
}

/** JSON with sorted keys, so configs compare by content whatever order their keys were written in. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

async function recordRelease(records: DeployRecords, service: Service, draft: ReleaseDraft): Promise<AcceptedDeploy> {
  const { store } = records;
  const [deployments, releases] = await Promise.all([serviceDeployments(store, records.deployments, service.name), claimReleases(store, service)]);
  const target = currentTarget(deployments);
  const targetRelease = target && releases.find((r) => r.version === target.release);
  if (target && targetRelease && targetRelease.digest === draft.digest && canonicalJson(targetRelease.config) === canonicalJson(draft.config)) {
    return { reply: reply('unchanged', targetRelease, target.id, `${service.name} already runs this image and config as v${targetRelease.version} (deployment ${target.id}, ${target.state})`) };
  }
  const stale = staleReason(service, releases, draft.triggeredAt);
  if (stale) {
    await appendJournal(store, { service: service.name, kind: 'deployment.stale', message: `${draft.trigger} trigger for ${draft.image} deploys nothing: ${stale}` });
    const latest = releases.at(-1);
    const message = `ignored as stale: ${stale}`;
    return { reply: latest ? reply('stale', latest, latest.deployment, message) : { statusCode: 200, outcome: 'stale', service: service.name, release: 'none', version: 0, deployment: '', image: draft.image, message } };
  }

  const id = newDeploymentId();
  let deployment: Deployment | undefined;
  // The release and its deployment record in one transaction: one round trip before the rollout.
  const { release, revision } = await createRelease(store, {
    service: service.name,
    serviceUuid: service.uuid,
    image: draft.image,
    digest: draft.digest,
    ...(draft.tag ? { tag: draft.tag } : {}),
    config: draft.config,
    pushedAt: draft.pushedAt,
    triggeredAt: draft.triggeredAt,
    deployment: id,
    ...(draft.rollbackOf ? { rollbackOf: draft.rollbackOf } : {}),
    ...(draft.runReleaseCommand ? { runReleaseCommand: true } : {}),
  }, releases, (release) => {
    const start = deploymentStart(release, draft.trigger, { id });
    deployment = start.deployment;
    return start.operations;
  });
  if (!deployment) throw new Error('the release was written without its deployment');
  // Its first phase is then one compare-and-swap, without a read, on the deploy's way to its units.
  deploymentWritten(store, deployment, revision);
  const origin = draft.rollbackOf ? `, rollback to v${draft.rollbackOf}` : '';
  return { release, deployment, reply: reply('created', release, id, `deploying ${service.name} v${release.version} (${unitsWanted(release.config)} units${origin})`) };
}

function reply(outcome: DeployReply['outcome'], release: Release, deployment: string, message: string): DeployReply {
  return { statusCode: 200, outcome, service: release.service, release: `v${release.version}`, version: release.version, deployment, image: release.image, message };
}
