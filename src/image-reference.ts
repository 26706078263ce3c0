// Parsing and normalising container image references the way Docker does, so that
// "web", "library/web", "docker.io/library/web" and "index.docker.io/library/web" compare equal.

export interface ImageReference {
  /** Registry host[:port]; "docker.io" when the reference names none. */
  registry: string;
  /** Repository path inside the registry, with Docker Hub's implicit "library/" added. */
  repository: string;
  tag?: string;
  digest?: string;
}

export const DOCKER_HUB = 'docker.io';
const DOCKER_HUB_ALIASES = new Set(['docker.io', 'index.docker.io', 'registry-1.docker.io']);

export function parseImageReference(reference: string): ImageReference {
  let rest = reference;
  let digest: string | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
  }
  let tag: string | undefined;
  const colon = rest.lastIndexOf(':');
  if (colon > rest.lastIndexOf('/')) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
  }
  const slash = rest.indexOf('/');
  const first = slash >= 0 ? rest.slice(0, slash) : '';
  const namesRegistry = slash >= 0 && (first.includes('.') || first.includes(':') || first === 'localhost' || first.startsWith('['));
  let registry = namesRegistry ? first : DOCKER_HUB;
  let repository = namesRegistry ? rest.slice(slash + 1) : rest;
  if (DOCKER_HUB_ALIASES.has(registry)) {
    registry = DOCKER_HUB;
    if (!repository.includes('/')) repository = `library/${repository}`;
  }
  return { registry, repository, ...(tag === undefined ? {} : { tag }), ...(digest === undefined ? {} : { digest }) };
}

/** "registry/repository", the identity two references must share to be the same image. */
export const repositoryName = (image: ImageReference): string => `${image.registry}/${image.repository}`;

export function formatImageReference(image: ImageReference): string {
  const base = repositoryName(image);
  if (image.digest) return `${base}@${image.digest}`;
  return `${base}:${image.tag ?? 'latest'}`;
}

export const sameRepository = (a: string, b: string): boolean =>
  repositoryName(parseImageReference(a)) === repositoryName(parseImageReference(b));
