import type { Store } from '../../store/store.js';
import { serviceKey } from '../../store/keys.js';
import { readRecord } from '../../store/json-records.js';
import { badRequest, notFound } from '../../http/errors.js';
import { formatImageReference, parseImageReference, repositoryName } from '../../image-reference.js';
import type { Service, ServiceConfig } from '../../schemas/service.js';
import { currentTarget, type Deployment, type DeployReply, type Release } from '../../schemas/release.js';
import type { RegistryClient } from './registry-client.js';
import { createRelease, getRelease, listReleases } from './releases.js';
import { listDeployments, newDeploymentId, saveNewDeployment } from './deployments.js';
import { appendJournal } from './journal.js';

export interface DeployTrigger {
  serviceName: string;
  containerRepository: string;
  pushedAt: number;
  /** What caused it: manual, registry, dockerhub, github. */
  trigger: string;
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
  trigger: string;
  rollbackOf?: number;
}

async function declaredService(store: Store, name: string): Promise<Service> {
  const found = await readRecord<Service>(store, serviceKey(name));
  if (!found) throw notFound(`service ${name} is not declared`);
  return found.record;
}

/** Validates a trigger and pins the image to its digest; the release gets the service's next config. */
export async function acceptDeploy(store: Store, registry: RegistryClient, trigger: DeployTrigger): Promise<AcceptedDeploy> {
  const service = await declaredService(store, trigger.serviceName);
  const requested = parseImageReference(trigger.containerRepository);
  const declared = parseImageReference(service.containerImage);
  if (repositoryName(requested) !== repositoryName(declared)) {
    throw badRequest(`containerRepository ${trigger.containerRepository} is not the repository of service ${service.name} (${service.containerImage})`);
  }
  const target = { ...requested, tag: requested.tag ?? (requested.digest ? undefined : declared.tag) };
  const digest = await registry.resolveDigest(target);
  return recordRelease(store, service, {
    image: formatImageReference({ ...target, digest }),
    digest,
    ...(target.tag ? { tag: target.tag } : {}),
    config: service.config,
    pushedAt: trigger.pushedAt,
    trigger: trigger.trigger,
  });
}

/** Deploys an earlier release's digest and config as a new release that records where it came from. */
export async function acceptRollback(store: Store, serviceName: string, version: number): Promise<AcceptedDeploy> {
  const service = await declaredService(store, serviceName);
  const earlier = await getRelease(store, serviceName, version);
  if (!earlier) throw notFound(`service ${serviceName} has no release v${version}`);
  return recordRelease(store, service, {
    image: earlier.image,
    digest: earlier.digest,
    ...(earlier.tag ? { tag: earlier.tag } : {}),
    config: earlier.config,
    pushedAt: 0,
    trigger: 'rollback',
    rollbackOf: earlier.version,
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

async function recordRelease(store: Store, service: Service, draft: ReleaseDraft): Promise<AcceptedDeploy> {
  const [deployments, releases] = await Promise.all([listDeployments(store, service.name), listReleases(store, service.name)]);
  const target = currentTarget(deployments);
  const targetRelease = target && releases.find((r) => r.version === target.release);
  if (target && targetRelease && targetRelease.digest === draft.digest && canonicalJson(targetRelease.config) === canonicalJson(draft.config)) {
    return { reply: reply('unchanged', targetRelease, target.id, `${service.name} already runs this image and config as v${targetRelease.version} (deployment ${target.id}, ${target.state})`) };
  }
  const lastPush = Math.max(0, ...releases.map((r) => r.pushedAt));
  if (draft.pushedAt > 0 && draft.pushedAt < lastPush) {
    const latest = releases.at(-1)!;
    return { reply: reply('stale', latest, latest.deployment, `ignored as stale: pushedAt ${draft.pushedAt} is older than the last deployed push (${lastPush})`) };
  }

  const id = newDeploymentId();
  const release = await createRelease(store, {
    service: service.name,
    image: draft.image,
    digest: draft.digest,
    ...(draft.tag ? { tag: draft.tag } : {}),
    config: draft.config,
    pushedAt: draft.pushedAt,
    deployment: id,
    ...(draft.rollbackOf ? { rollbackOf: draft.rollbackOf } : {}),
  });
  const deployment = await startDeployment(store, release, draft.trigger, id);
  const origin = draft.rollbackOf ? `, rollback to v${draft.rollbackOf}` : '';
  return { release, deployment, reply: reply('created', release, id, `deploying ${service.name} v${release.version} (${release.config.numInstances} units${origin})`) };
}

/** Records a pending deployment of `release` (a new one, or an earlier one being reverted to). */
export async function startDeployment(store: Store, release: Release, trigger: string, id = newDeploymentId()): Promise<Deployment> {
  const now = new Date().toISOString();
  const deployment: Deployment = { id, service: release.service, release: release.version, image: release.image, state: 'pending', trigger, units: [], createdAt: now, updatedAt: now };
  await saveNewDeployment(store, deployment);
  await appendJournal(store, { service: release.service, deployment: id, kind: 'deployment.created', message: `v${release.version} ${release.image} (${trigger})` });
  return deployment;
}

function reply(outcome: DeployReply['outcome'], release: Release, deployment: string, message: string): DeployReply {
  return { statusCode: 200, outcome, service: release.service, release: `v${release.version}`, version: release.version, deployment, image: release.image, message };
}
