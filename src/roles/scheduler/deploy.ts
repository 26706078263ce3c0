import type { Store } from '../../store/store.js';
import { serviceKey } from '../../store/keys.js';
import { readRecord } from '../../store/json-records.js';
import { badRequest, notFound } from '../../http/errors.js';
import { formatImageReference, parseImageReference, repositoryName } from '../../image-reference.js';
import type { Service } from '../../schemas/service.js';
import type { Deployment, DeployReply, Release } from '../../schemas/release.js';
import type { RegistryClient } from './registry-client.js';
import { createRelease } from './releases.js';
import { newDeploymentId, saveNewDeployment } from './deployments.js';
import { appendJournal } from './journal.js';

export interface DeployTrigger {
  serviceName: string;
  containerRepository: string;
  pushedAt: number;
  /** What caused it: manual, registry, dockerhub, github, rollback. */
  trigger: string;
}

export interface AcceptedDeploy {
  service: Service;
  release: Release;
  deployment: Deployment;
  reply: DeployReply;
}

/**
 * Validates a trigger, pins the image to its digest and records the release and its deployment.
 * The rollout itself runs afterwards, in the background.
 */
export async function acceptDeploy(store: Store, registry: RegistryClient, trigger: DeployTrigger): Promise<AcceptedDeploy> {
  const found = await readRecord<Service>(store, serviceKey(trigger.serviceName));
  if (!found) throw notFound(`service ${trigger.serviceName} is not declared`);
  const service = found.record;
  const requested = parseImageReference(trigger.containerRepository);
  const declared = parseImageReference(service.containerImage);
  if (repositoryName(requested) !== repositoryName(declared)) {
    throw badRequest(
      `containerRepository ${trigger.containerRepository} is not the repository of service ${service.name} (${service.containerImage})`,
    );
  }
  const target = { ...requested, tag: requested.tag ?? (requested.digest ? undefined : declared.tag) };
  const digest = await registry.resolveDigest(target);
  const id = newDeploymentId();
  const release = await createRelease(store, {
    service: service.name,
    image: formatImageReference({ ...target, digest }),
    digest,
    ...(target.tag ? { tag: target.tag } : {}),
    config: service.config,
    pushedAt: trigger.pushedAt,
    deployment: id,
  });
  const now = new Date().toISOString();
  const deployment: Deployment = {
    id,
    service: service.name,
    release: release.version,
    image: release.image,
    state: 'pending',
    trigger: trigger.trigger,
    units: [],
    createdAt: now,
    updatedAt: now,
  };
  await saveNewDeployment(store, deployment);
  await appendJournal(store, { service: service.name, deployment: id, kind: 'deployment.created', message: `v${release.version} ${release.image} (${trigger.trigger})` });
  return {
    service,
    release,
    deployment,
    reply: {
      statusCode: 200,
      service: service.name,
      release: `v${release.version}`,
      version: release.version,
      deployment: id,
      image: release.image,
      message: `deploying ${service.name} v${release.version} (${release.config.numInstances} units)`,
    },
  };
}
