import type { Dispatcher } from 'undici';
import { request } from '../../../http/undici-request.js';
import { HttpError, badGateway, badRequest } from '../../../http/errors.js';
import { DOCKER_HUB, type ImageReference } from '../../../image-reference.js';
import type { CredentialLookup, RegistryCredential } from '../../../auth/registry-credentials.js';
import { RegistryAllowList, refusalIn } from '../../../http/registry-policy.js';
import { DestinationPolicy } from '../../../http/destination-policy.js';

// Resolves a tag to its manifest digest through the Registry HTTP API v2, so that a release pins
// exactly what was pushed, even if the tag moves later; and lists a repository's tags for the
// dashboard's Deploy picker (the login stays here: only the tags go out). Every host it contacts (the registry, the
// token realm a registry points to) passes the policy in registry-policy.ts. An error names the
// registry and the status; of what a registry or realm answered it quotes only the reason of a
// refused login (a short printable line of its JSON errors), so the person deploying learns why.

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

/** What a TLS client reads when the server answers in plain HTTP: the registry speaks no TLS. */
const PLAIN_HTTP_ANSWER = 'ERR_SSL_WRONG_VERSION_NUMBER';

/** Node's codes for a certificate no trusted CA vouches for. */
const UNTRUSTED_CERTIFICATE = new Set(['UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'SELF_SIGNED_CERT_IN_CHAIN', 'DEPTH_ZERO_SELF_SIGNED_CERT', 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY']);

/** Tags asked for in one page, and the most of a tag list read. */
const TAGS_PAGE = 1000;
const TAGS_REPLY_BYTES = 512 * 1024;
/** A tag as Distribution allows it. */
const TAG = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;

/** An error answer's reason is one line of a registry's JSON `errors`: read at most this much of it. */
const REASON_REPLY_BYTES = 16 * 1024;
const REASON_CHARS = 200;

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
  /** The registry logins admins stored; none: every registry is reached anonymously. */
  credentials?: CredentialLookup;
  /** Registries reached over plain HTTP besides loopback ones. */
  insecureRegistries?: string[];
  /** --allowed-registry: registries on loopback, private or link-local addresses the operator allows. */
  allowedRegistries?: string[];
  timeoutMs?: number;
}

export class RegistryClient {
  private readonly insecure: ReadonlySet<string>;
  private readonly destinations: DestinationPolicy;
  /** Loopback and --insecure-registry registries found to speak plain HTTP (the others are tried with TLS first, as Docker does). */
  private readonly plainHttp = new Set<string>();

  constructor(private readonly options: RegistryClientOptions = {}) {
    this.insecure = new Set(options.insecureRegistries ?? []);
    this.destinations = new DestinationPolicy(new RegistryAllowList(options.allowedRegistries ?? []));
  }

  close(): Promise<void> {
    return this.destinations.close();
  }

  /**
   * The digest `image` (tag or digest) names now. 400 when it does not exist, its registry is not
   * allowed or refuses the login (naming the registry's status and reason), 502 when the registry fails.
   */
  async resolveDigest(image: ImageReference): Promise<string> {
    const reference = image.digest ?? image.tag ?? 'latest';
    return this.answered(image.registry, `/v2/${image.repository}/manifests/${reference}`, 'HEAD', `${image.repository}:${reference}`, async (response) => {
      await response.body.dump();
      const digest = response.headers['docker-content-digest'];
      if (response.statusCode !== 200 || typeof digest !== 'string') {
        throw badGateway(`registry ${image.registry} answered ${response.statusCode} for ${image.repository}:${reference}`);
      }
      return digest;
    });
  }

  /**
   * The tags of `image`'s repository, as the registry lists them (`GET /v2/<name>/tags/list`, its
   * first page of up to TAGS_PAGE), with the same login, policy and errors as resolveDigest.
   */
  async listTags(image: ImageReference): Promise<string[]> {
    return this.answered(image.registry, `/v2/${image.repository}/tags/list?n=${TAGS_PAGE}`, 'GET', image.repository, async (response) => {
      const text = response.statusCode === 200 ? await boundedText(response.body, TAGS_REPLY_BYTES) : (await response.body.dump(), undefined);
      if (response.statusCode !== 200) throw badGateway(`registry ${image.registry} answered ${response.statusCode} for the tags of ${image.repository}`);
      try {
        const tags = (JSON.parse(text ?? '') as { tags?: unknown }).tags ?? [];
        if (Array.isArray(tags) && tags.every((tag) => typeof tag === 'string' && TAG.test(tag))) return tags as string[];
      } catch {
        // reported below, without the body
      }
      throw badGateway(`registry ${image.registry} answered no list of tags for ${image.repository}`);
    });
  }

  /**
   * A request of `path` on `registry` with its stored login when it asks for one, its refusals and
   * a missing `what` turned into the errors people read; `read` takes any other answer.
   */
  private async answered<T>(registry: string, path: string, method: 'GET' | 'HEAD', what: string, read: (response: Dispatcher.ResponseData) => Promise<T>): Promise<T> {
    // The stored login is read while the first, anonymous request is under way (it is only needed
    // if the registry asks for one): one round trip less before a deploy's units are placed.
    // A store error still fails the deploy as it did; the registry's errors are judged below.
    const firstTry = this.reach(registry, path, method).then(
      (first) => ({ first }),
      (error: unknown) => ({ error }),
    );
    let credential: RegistryCredential | undefined;
    try {
      credential = await this.options.credentials?.(registry);
    } catch (error) {
      void firstTry.then((attempt) => ('first' in attempt ? attempt.first.response.body.dump() : undefined)).catch(() => undefined);
      throw error;
    }
    try {
      const attempt = await firstTry;
      if ('error' in attempt) throw attempt.error;
      const { first } = attempt;
      const { base } = first;
      let { response } = first;
      let authorization: string | undefined;
      if (response.statusCode === 401) {
        authorization = await this.authorization(registry, base, String(response.headers['www-authenticate'] ?? ''), credential);
        if (authorization) {
          await response.body.dump();
          response = await this.send(new URL(path, base), registryRequest(method, authorization));
        }
      }
      if (response.statusCode === 401 || response.statusCode === 403) {
        await response.body.dump();
        const reason = await this.reasonOf(new URL(path, base), authorization);
        throw badRequest(`${response.statusCode} from ${registry}: ${reason} (${loginHint(registry, credential)})`);
      }
      if (response.statusCode === 404) {
        await response.body.dump();
        throw badRequest(`containerRepository: ${what} does not exist in registry ${registry}`);
      }
      return await read(response);
    } catch (error) {
      if (error instanceof HttpError) throw error;
      const refused = refusalIn(error);
      if (refused) throw badRequest(`containerRepository: registry ${registry} is not allowed: ${refused.message}; ${NOT_ALLOWED_RULE}`);
      // Only the error's code: a message can carry bytes the registry sent.
      const code = codeOf(error);
      if (UNTRUSTED_CERTIFICATE.has(code)) {
        throw badGateway(`registry ${registry} presented a certificate the scheduler does not trust (${code}): give the scheduler its CA with NODE_EXTRA_CA_CERTS`);
      }
      throw badGateway(`registry ${registry} is unreachable (${code})`);
    }
  }

  private baseOf(registry: string): URL {
    if (registry === DOCKER_HUB) return new URL('https://registry-1.docker.io');
    return new URL(`${this.plainHttp.has(registry) ? 'http' : 'https'}://${registry}`);
  }

  /**
   * The first, anonymous HEAD of a manifest. A loopback or --insecure-registry registry is tried
   * with TLS first and over plain HTTP when it answers in plain HTTP (remembered), as Docker does:
   * a registry behind TLS there is reached with TLS, its certificate checked.
   */
  private async reach(registry: string, path: string, method: 'GET' | 'HEAD'): Promise<{ response: Dispatcher.ResponseData; base: URL }> {
    const base = this.baseOf(registry);
    try {
      return { response: await this.send(new URL(path, base), registryRequest(method)), base };
    } catch (error) {
      const mayBePlain = base.protocol === 'https:' && (isLoopback(registry) || this.insecure.has(registry));
      if (!mayBePlain || codeOf(error) !== PLAIN_HTTP_ANSWER) throw error;
      this.plainHttp.add(registry);
      const plain = this.baseOf(registry);
      return { response: await this.send(new URL(path, plain), registryRequest(method)), base: plain };
    }
  }

  /** What to answer a registry's 401 challenge with: a bearer token (with the login, if any, else anonymous) or the login itself. */
  private async authorization(registry: string, base: URL, challenge: string, credential: RegistryCredential | undefined): Promise<string | undefined> {
    if (/^bearer\s/i.test(challenge)) {
      const token = await this.fetchToken(registry, base, challenge, credential);
      return token ? `Bearer ${token}` : undefined;
    }
    if (/^basic(\s|$)/i.test(challenge) && credential) return basicAuthorization(credential);
    return undefined;
  }

  /**
   * Why the registry refused: a HEAD answer has no body, so the same request again as a GET, and
   * only the `message`s of its JSON `errors` (printable, bounded), never any other byte it sent.
   */
  private async reasonOf(url: URL, authorization?: string): Promise<string> {
    try {
      const response = await this.send(url, { method: 'GET', headers: { accept: MANIFEST_TYPES, ...(authorization ? { authorization } : {}) } });
      return errorReason(await boundedText(response.body, REASON_REPLY_BYTES)) ?? 'no reason given';
    } catch {
      return 'no reason given';
    }
  }

  /** A request that passes the policy: named hosts as they are, an address checked here, a name when it is resolved. */
  private async send(url: URL, options: { method: 'GET' | 'HEAD'; headers: Record<string, string> }): Promise<Dispatcher.ResponseData> {
    const dispatcher = await this.destinations.dispatcherFor(url);
    const timeout = this.options.timeoutMs ?? 10_000;
    return request(url, { ...options, dispatcher, headersTimeout: timeout, bodyTimeout: timeout });
  }

  /**
   * A bearer token, for registries (Docker Hub, GHCR, a registry with token auth) that answer 401
   * with a challenge: asked for with the registry's login when there is one, else anonymously.
   * The realm must be HTTPS or the registry's own host and port: a registry may not send the
   * scheduler (and a login) to plain-HTTP URLs elsewhere, and it passes the same address policy.
   */
  private async fetchToken(registry: string, base: URL, challenge: string, credential?: RegistryCredential): Promise<string | undefined> {
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
      response = await this.send(url, { method: 'GET', headers: { accept: 'application/json', ...(credential ? { authorization: basicAuthorization(credential) } : {}) } });
    } catch (error) {
      const refused = refusalIn(error);
      if (refused) throw badGateway(`registry ${registry} named the token realm ${url.origin}, refused: ${refused.message}; ${NOT_ALLOWED_RULE}`);
      throw badGateway(`the token realm ${url.origin} of registry ${registry} is unreachable (${codeOf(error)})`);
    }
    if (response.statusCode === 401 || response.statusCode === 403) {
      const reason = errorReason(await boundedText(response.body, REASON_REPLY_BYTES).catch(() => undefined)) ?? 'no reason given';
      throw badRequest(`${response.statusCode} from the token realm ${url.origin} of registry ${registry}: ${reason} (${loginHint(registry, credential)})`);
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

function codeOf(error: unknown): string {
  const { code, name } = (error ?? {}) as { code?: unknown; name?: unknown };
  return typeof code === 'string' ? code : typeof name === 'string' ? name : 'error';
}

/** A manifest's HEAD (its digest) or a GET of JSON (a tag list), with the login's header once the registry asked for it. */
const registryRequest = (method: 'GET' | 'HEAD', authorization?: string) => ({
  method,
  headers: { accept: method === 'HEAD' ? MANIFEST_TYPES : 'application/json', ...(authorization ? { authorization } : {}) },
});

const basicAuthorization = ({ username, password }: RegistryCredential): string => `Basic ${Buffer.from(`${username}:${password}`).toString('base64')}`;

/** What the person deploying can do about a refusal. */
const loginHint = (registry: string, credential: RegistryCredential | undefined): string =>
  credential ? `the login of user ${credential.username} was refused; log in again with platform registry login ${registry}` : `no login for ${registry}: platform registry login ${registry}`;

/**
 * The reason in a registry's error body (`{"errors":[{"code","message"}]}`, as Distribution and
 * token servers answer; `details` for some token servers): printable ASCII, at most 200 characters.
 */
export function errorReason(text: string | undefined): string | undefined {
  if (!text) return undefined;
  let body: { errors?: Array<{ message?: unknown; code?: unknown }>; details?: unknown };
  try {
    body = JSON.parse(text) as typeof body;
  } catch {
    return undefined;
  }
  const messages = Array.isArray(body?.errors) ? body.errors.map((error) => error?.message ?? error?.code) : [body?.details];
  const reason = messages
    .filter((message): message is string => typeof message === 'string')
    .join('; ')
    .replace(/[^\x20-\x7e]/g, '')
    .trim()
    .slice(0, REASON_CHARS);
  return reason || undefined;
}
