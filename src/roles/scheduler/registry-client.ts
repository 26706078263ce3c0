import { request } from 'undici';
import { badGateway, badRequest } from '../../http/errors.js';
import { DOCKER_HUB, type ImageReference } from '../../image-reference.js';

// Resolves a tag to its manifest digest through the Registry HTTP API v2, so that a release pins
// exactly what was pushed, even if the tag moves later.

const MANIFEST_TYPES = [
  'application/vnd.oci.image.index.v1+json',
  'application/vnd.docker.distribution.manifest.list.v2+json',
  'application/vnd.oci.image.manifest.v1+json',
  'application/vnd.docker.distribution.manifest.v2+json',
].join(', ');

const isLoopback = (host: string): boolean => /^(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?$/.test(host);

function registryBase(registry: string, insecure: ReadonlySet<string>): string {
  if (registry === DOCKER_HUB) return 'https://registry-1.docker.io';
  return `${isLoopback(registry) || insecure.has(registry) ? 'http' : 'https'}://${registry}`;
}

/** Anonymous bearer token, for registries (Docker Hub, GHCR) that answer 401 with a challenge. */
async function fetchToken(challenge: string): Promise<string | undefined> {
  const fields = Object.fromEntries([...challenge.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
  if (!fields.realm) return undefined;
  const url = new URL(fields.realm);
  if (fields.service) url.searchParams.set('service', fields.service);
  if (fields.scope) url.searchParams.set('scope', fields.scope);
  const response = await request(url, { headersTimeout: 10_000, bodyTimeout: 10_000 });
  const body = (await response.body.json()) as { token?: string; access_token?: string };
  return body.token ?? body.access_token;
}

export interface RegistryClientOptions {
  /** Registries reached over plain HTTP besides loopback ones. */
  insecureRegistries?: string[];
  timeoutMs?: number;
}

export class RegistryClient {
  private readonly insecure: ReadonlySet<string>;
  constructor(private readonly options: RegistryClientOptions = {}) {
    this.insecure = new Set(options.insecureRegistries ?? []);
  }

  /** The digest `image` (tag or digest) names now. 400 when it does not exist, 502 when the registry fails. */
  async resolveDigest(image: ImageReference): Promise<string> {
    const reference = image.digest ?? image.tag ?? 'latest';
    const url = `${registryBase(image.registry, this.insecure)}/v2/${image.repository}/manifests/${reference}`;
    const timeout = this.options.timeoutMs ?? 10_000;
    const head = (authorization?: string) =>
      request(url, {
        method: 'HEAD',
        headers: { accept: MANIFEST_TYPES, ...(authorization ? { authorization } : {}) },
        headersTimeout: timeout,
        bodyTimeout: timeout,
      });
    try {
      let response = await head();
      if (response.statusCode === 401) {
        const challenge = String(response.headers['www-authenticate'] ?? '');
        const token = challenge.startsWith('Bearer') ? await fetchToken(challenge) : undefined;
        if (token) response = await head(`Bearer ${token}`);
      }
      await response.body.dump();
      if (response.statusCode === 404) {
        throw badRequest(`containerRepository: ${image.repository}:${reference} does not exist in registry ${image.registry}`);
      }
      const digest = response.headers['docker-content-digest'];
      if (response.statusCode !== 200 || typeof digest !== 'string') {
        throw badGateway(`registry ${image.registry} answered ${response.statusCode} for ${image.repository}:${reference}`);
      }
      return digest;
    } catch (error) {
      if (error instanceof Error && 'statusCode' in error) throw error;
      throw badGateway(`registry ${image.registry} is unreachable: ${(error as Error).message}`);
    }
  }
}
