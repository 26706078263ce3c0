import { isIP } from 'node:net';
import { Agent, request, type Dispatcher } from 'undici';
import { HttpError, badGateway, badRequest } from '../../http/errors.js';
import { DOCKER_HUB, type ImageReference } from '../../image-reference.js';
import { RegistryAllowList, RegistryRefused, checkedLookup, refusalOf } from './registry-policy.js';

// Resolves a tag to its manifest digest through the Registry HTTP API v2, so that a release pins
// exactly what was pushed, even if the tag moves later. Every host it contacts (the registry, the
// token realm a registry points to) passes the policy in registry-policy.ts, and no error it
// reports quotes what a registry or a realm answered: it names the registry and the status.

const MANIFEST_TYPES = [
  'application/vnd.oci.image.index.v1+json',
  'application/vnd.docker.distribution.manifest.list.v2+json',
  'application/vnd.oci.image.manifest.v1+json',
  'application/vnd.docker.distribution.manifest.v2+json',
].join(', ');

/** A token answer larger than this is no token: read no further. */
const TOKEN_REPLY_BYTES = 64 * 1024;

const NOT_ALLOWED_RULE =
  'the scheduler contacts loopback, private, link-local and unspecified addresses only for registries named with --allowed-registry';

const isLoopback = (host: string): boolean => /^(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?$/.test(host);

function registryBase(registry: string, insecure: ReadonlySet<string>): URL {
  if (registry === DOCKER_HUB) return new URL('https://registry-1.docker.io');
  return new URL(`${isLoopback(registry) || insecure.has(registry) ? 'http' : 'https'}://${registry}`);
}

const portOf = (url: URL): number => Number(url.port || (url.protocol === 'https:' ? 443 : 80));

/** Reads at most `limit` bytes of a body; undefined when it is longer. */
async function boundedText(body: Dispatcher.ResponseData['body'], limit: number): Promise<string | undefined> {
  const chunks: Buffer[] = [];
  let length = 0;
  for await (const chunk of body) {
    length += (chunk as Buffer).length;
    if (length > limit) {
      body.destroy();
      return undefined;
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

export interface RegistryClientOptions {
  /** Registries reached over plain HTTP besides loopback ones. */
  insecureRegistries?: string[];
  /** --allowed-registry: registries on loopback, private or link-local addresses the operator allows. */
  allowedRegistries?: string[];
  timeoutMs?: number;
}

export class RegistryClient {
  private readonly insecure: ReadonlySet<string>;
  private readonly allowed: RegistryAllowList;
  /** For hosts the operator named: no address check. */
  private readonly named = new Agent();
  /** For every other host: a name connects only to the allowed addresses it resolves to. */
  private readonly checked: Agent;

  constructor(private readonly options: RegistryClientOptions = {}) {
    this.insecure = new Set(options.insecureRegistries ?? []);
    this.allowed = new RegistryAllowList(options.allowedRegistries ?? []);
    this.checked = new Agent({ connect: { lookup: checkedLookup(this.allowed) } });
  }

  async close(): Promise<void> {
    await Promise.all([this.named.close(), this.checked.close()]);
  }

  /** The digest `image` (tag or digest) names now. 400 when it does not exist or its registry is not allowed, 502 when the registry fails. */
  async resolveDigest(image: ImageReference): Promise<string> {
    const reference = image.digest ?? image.tag ?? 'latest';
    const base = registryBase(image.registry, this.insecure);
    const url = new URL(`/v2/${image.repository}/manifests/${reference}`, base);
    const head = (authorization?: string) =>
      this.send(url, { method: 'HEAD', headers: { accept: MANIFEST_TYPES, ...(authorization ? { authorization } : {}) } });
    try {
      let response = await head();
      if (response.statusCode === 401) {
        const challenge = String(response.headers['www-authenticate'] ?? '');
        const token = challenge.startsWith('Bearer') ? await this.fetchToken(image.registry, base, challenge) : undefined;
        if (token) {
          await response.body.dump();
          response = await head(`Bearer ${token}`);
        }
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
      if (error instanceof HttpError) throw error;
      const refused = refusalIn(error);
      if (refused) throw badRequest(`containerRepository: registry ${image.registry} is not allowed: ${refused.message}; ${NOT_ALLOWED_RULE}`);
      // Only the error's code: a message can carry bytes the registry sent.
      throw badGateway(`registry ${image.registry} is unreachable (${codeOf(error)})`);
    }
  }

  /** A request that passes the policy: named hosts as they are, an address checked here, a name when it is resolved. */
  private send(url: URL, options: { method: 'GET' | 'HEAD'; headers: Record<string, string> }) {
    const port = portOf(url);
    let dispatcher = this.checked;
    if (this.allowed.names(url.hostname, port)) dispatcher = this.named;
    else if (isIP(url.hostname.replace(/^\[(.*)\]$/, '$1')) !== 0) {
      const refusal = refusalOf(url.hostname.replace(/^\[(.*)\]$/, '$1'), this.allowed);
      if (refusal) return Promise.reject(new RegistryRefused(refusal));
    }
    const timeout = this.options.timeoutMs ?? 10_000;
    return request(url, { ...options, dispatcher, headersTimeout: timeout, bodyTimeout: timeout });
  }

  /**
   * An anonymous bearer token, for registries (Docker Hub, GHCR) that answer 401 with a challenge.
   * The realm must be HTTPS or the registry's own host and port: a registry may not send the
   * scheduler to fetch plain-HTTP URLs elsewhere, and it passes the same address policy.
   */
  private async fetchToken(registry: string, base: URL, challenge: string): Promise<string | undefined> {
    const fields = Object.fromEntries([...challenge.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    if (!fields.realm) return undefined;
    let url: URL;
    try {
      url = new URL(fields.realm);
    } catch {
      throw badGateway(`registry ${registry} named a token realm that is not a URL`);
    }
    const ownHost = url.host === base.host && (url.protocol === 'https:' || url.protocol === 'http:');
    if (!ownHost && url.protocol !== 'https:') {
      throw badGateway(`registry ${registry} named the token realm ${url.origin}, refused: a realm must use HTTPS or be on the registry's own host and port`);
    }
    if (fields.service) url.searchParams.set('service', fields.service);
    if (fields.scope) url.searchParams.set('scope', fields.scope);
    let response: Dispatcher.ResponseData;
    try {
      response = await this.send(url, { method: 'GET', headers: { accept: 'application/json' } });
    } catch (error) {
      const refused = refusalIn(error);
      if (refused) throw badGateway(`registry ${registry} named the token realm ${url.origin}, refused: ${refused.message}; ${NOT_ALLOWED_RULE}`);
      throw badGateway(`the token realm ${url.origin} of registry ${registry} is unreachable (${codeOf(error)})`);
    }
    if (response.statusCode !== 200) {
      await response.body.dump();
      throw badGateway(`the token realm ${url.origin} of registry ${registry} answered ${response.statusCode}`);
    }
    const text = await boundedText(response.body, TOKEN_REPLY_BYTES);
    try {
      const body = JSON.parse(text ?? '') as { token?: unknown; access_token?: unknown };
      const token = body.token ?? body.access_token;
      if (typeof token === 'string' && /^[\x21-\x7e]+$/.test(token)) return token;
    } catch {
      // reported below, without the body
    }
    throw badGateway(`the token realm ${url.origin} of registry ${registry} answered no token`);
  }
}

function refusalIn(error: unknown): RegistryRefused | undefined {
  if (error instanceof RegistryRefused) return error;
  const cause = (error as { cause?: unknown } | undefined)?.cause;
  return cause instanceof RegistryRefused ? cause : undefined;
}

function codeOf(error: unknown): string {
  const { code, name } = (error ?? {}) as { code?: unknown; name?: unknown };
  return typeof code === 'string' ? code : typeof name === 'string' ? name : 'error';
}
