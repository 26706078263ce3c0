import { parseImageReference, repositoryName, type ImageReference } from '../../../image-reference.js';
import type { Service } from '../../../schemas/service.js';

// Which declared services a pushed image concerns, and what each should do about it. Pure: the
// hooks turn their payloads into a Push, this decides, the dispatcher acts.

export type HookKind = 'registry' | 'dockerhub' | 'github';

/** One pushed manifest, whichever hook reported it. */
export interface Push {
  hook: HookKind;
  /** The event or delivery id, the same in every repeated delivery; undefined when the sender gives none. */
  event?: string;
  image: ImageReference;
  /** Unix seconds of the push, 0 when unknown (never stale). */
  pushedAt: number;
}

export type MatchAction = 'deploy' | 'record' | 'skip';

export interface Match {
  service: string;
  action: MatchAction;
  reason: string;
}

export type MatchableService = Pick<Service, 'name' | 'containerImage' | 'autoDeploy'>;

/**
 * The repository `path` on registry `host`, normalised as Docker does (docker.io aliases and the
 * implicit library/ prefix). A host without a dot, colon or `localhost` is taken literally, not as
 * a Docker Hub namespace: registries report the host clients pushed to.
 */
export function pushedRepository(host: string, path: string): ImageReference {
  const registry = host.toLowerCase();
  if (registry.includes('.') || registry.includes(':') || registry === 'localhost') {
    const parsed = parseImageReference(`${registry}/${path}`);
    return { registry: parsed.registry, repository: parsed.repository };
  }
  return { registry, repository: path };
}

/**
 * `registry/repository[:tag][@digest]`: for messages, and what the scheduler is asked to deploy
 * (the tag is recorded in the release, the digest pins exactly what was pushed).
 */
export const describeImage = (image: ImageReference): string =>
  `${repositoryName(image)}${image.tag ? `:${image.tag}` : ''}${image.digest ? `@${image.digest}` : ''}`;

function decide(push: Push, service: MatchableService, declared: ImageReference): Match {
  const name = service.name;
  if (declared.digest) return { service: name, action: 'skip', reason: `${name} is pinned to ${declared.digest}` };
  if (!push.image.tag) return { service: name, action: 'skip', reason: 'the push names no tag (a child manifest of an index, or a push by digest)' };
  if (declared.tag && declared.tag !== push.image.tag) return { service: name, action: 'skip', reason: `${name} follows tag ${declared.tag}, not ${push.image.tag}` };
  if (service.autoDeploy === 'never') return { service: name, action: 'record', reason: `${name} has autoDeploy never: the push is journaled, not deployed` };
  return { service: name, action: 'deploy', reason: `deploying ${describeImage(push.image)} to ${name}` };
}

/**
 * The services whose containerImage names the pushed repository. A declaration with a tag follows
 * that tag only; one without a tag deploys every pushed tag; one pinned to a digest never moves.
 */
export function matchPush(push: Push, services: readonly MatchableService[]): Match[] {
  const pushed = repositoryName(push.image);
  const matches: Match[] = [];
  for (const service of services) {
    const declared = parseImageReference(service.containerImage);
    if (repositoryName(declared) === pushed) matches.push(decide(push, service, declared));
  }
  return matches.sort((a, b) => (a.service < b.service ? -1 : a.service > b.service ? 1 : 0));
}
