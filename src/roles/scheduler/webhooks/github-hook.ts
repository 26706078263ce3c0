import type { FastifyRequest } from 'fastify';
import { buildAjv, type RoleServer } from '../../../http/server.js';
import { validatorOnFirstUse } from '../../../http/schema-compilers.js';
import { describeValidation, unauthorized } from '../../../http/errors.js';
import { parseImageReference } from '../../../image-reference.js';
import { IMAGE_REFERENCE, IMAGE_TAG } from '../../../schemas/image.js';
import { ErrorReply, errorResponses } from '../../../schemas/common.js';
import { GitHubHeaders, GitHubPackageEvent, GitHubPayload, WebhookReply, type GitHubPackage } from '../../../schemas/webhooks.js';
import { appendJournal } from '../../../store/records/journal.js';
import { githubSignatureValid, hookAccess, type HookSecret } from './auth.js';
import { dispatchPushes, type HookContext } from './dispatch.js';
import { pushedRepository, type Push } from './matching.js';
import { useJsonBodies } from './json-body.js';

// POST /hooks/github: GitHub's `package` and `registry_package` events for container images
// (GHCR). Verified with X-Hub-Signature-256, an HMAC-SHA256 of the raw body, before the body is
// even parsed; deduplicated on X-GitHub-Delivery, which GitHub keeps when it redelivers.
// GitHub announces every version of a package, and most deploy nothing (the untagged per-platform
// manifests of a multi-arch push, other package types): a signed event that describes nothing
// deployable is answered 200 with the reason and journaled, never 400, which GitHub would list
// as a failed delivery.

const ROUTE = 'POST /hooks/github';
/** A digest as GitHub writes it: `sha256:<hex>` or bare hex, in either case. */
const SHA256 = /^(?:sha256:)?([a-f0-9]{64})$/i;
const TAG = new RegExp(IMAGE_TAG);
const CONTAINER_TYPES = new Set(['container', 'docker']);
const DEPLOYING_ACTIONS = new Set(['published', 'updated']);
const imageReference = new RegExp(IMAGE_REFERENCE);
/** Compiled on the first event, not at start (issue 29). */
const readable = validatorOnFirstUse<GitHubPackageEvent>(buildAjv(false), GitHubPackageEvent);
/** GitHub writes 0001-01-01 for times it does not know. */
const YEAR_2000 = Date.UTC(2000, 0, 1);

export type GitHubOutcome = { push: Push } | { ignored: string };
type PackageVersion = NonNullable<GitHubPackage['package_version']>;

/** `sha256:<lowercase hex>` from any of the forms GitHub writes a digest in; undefined for anything else. */
function digestOf(value: string | null | undefined): string | undefined {
  const hex = SHA256.exec(value ?? '')?.[1];
  return hex === undefined ? undefined : `sha256:${hex.toLowerCase()}`;
}

function pushedAtOf(pkg: GitHubPackage): number {
  const version = pkg.package_version;
  for (const time of [version?.updated_at, version?.created_at, pkg.updated_at]) {
    const ms = Date.parse(time ?? '');
    if (Number.isFinite(ms) && ms > YEAR_2000) return Math.floor(ms / 1000);
  }
  return 0;
}

/**
 * The image a version names, lower-cased and without its tag: its package_url (`ghcr.io/owner/name:tag`,
 * or `ghcr.io/owner/name:` for an untagged version) when GitHub sends one, else
 * ghcr.io/<namespace>/<name>; and the tag of the package_url, '' when it has none.
 */
function namedImage(pkg: GitHubPackage, version: PackageVersion): { reference?: string; tag: string } {
  const url = version.package_url?.split('@')[0];
  if (url) {
    const colon = url.lastIndexOf(':');
    const tagged = colon > url.lastIndexOf('/');
    return { reference: (tagged ? url.slice(0, colon) : url).toLowerCase(), tag: tagged ? url.slice(colon + 1) : '' };
  }
  const owner = pkg.namespace ?? pkg.owner?.login;
  return { reference: owner && pkg.name ? `ghcr.io/${owner}/${pkg.name}`.toLowerCase() : undefined, tag: '' };
}

/** The push a container version describes: a repository, a tag and a digest; or why it deploys nothing. */
function versionPush(event: string, delivery: string, pkg: GitHubPackage, version: PackageVersion): GitHubOutcome {
  const named = namedImage(pkg, version);
  if (!named.reference) return { ignored: `${event} names no image: no package_version.package_url, and no namespace and name` };
  if (!imageReference.test(named.reference)) return { ignored: `${named.reference} is not an image repository` };
  const digest = [version.container_metadata?.tag?.digest, version.name, version.version].map(digestOf).find((found) => found !== undefined);
  const tag = version.container_metadata?.tag?.name || named.tag;
  const what = `${named.reference}${digest ? `@${digest}` : ''}`;
  if (!tag) return { ignored: `${what} is an untagged version (one platform of a multi-arch image, or a push by digest): only a tagged version deploys` };
  if (!TAG.test(tag)) return { ignored: `${what}: ${tag} is not a tag` };
  if (!digest) return { ignored: `${named.reference}:${tag} names no digest (sha256:…) to deploy` };
  const { registry, repository } = parseImageReference(named.reference);
  return { push: { hook: 'github', event: delivery, image: { ...pushedRepository(registry, repository), tag, digest }, pushedAt: pushedAtOf(pkg) } };
}

/** The push a GitHub event reports, or why it deploys nothing. */
export function gitHubPush(event: string, delivery: string, payload: GitHubPayload): GitHubOutcome {
  if (event === 'ping') return { ignored: 'ping: the hook reaches the platform' };
  if (event !== 'package' && event !== 'registry_package') return { ignored: `${event} events deploy nothing (subscribe to package or registry_package)` };
  if (!readable(payload)) return { ignored: `${describeValidation(readable.errors ?? [], 'the body')}: not a ${event} event the platform can read` };
  const pkg = payload[event];
  if (!pkg) return { ignored: `a ${event} event without ${event}: nothing to deploy` };
  if (!DEPLOYING_ACTIONS.has(payload.action ?? '')) return { ignored: `${event} ${payload.action ?? 'without an action'}: only published or updated versions deploy` };
  const type = pkg.package_type ?? 'none';
  if (!CONTAINER_TYPES.has(type.toLowerCase())) return { ignored: `a package of type ${type} is not a container image (only CONTAINER and docker packages deploy)` };
  if (!pkg.package_version) return { ignored: `${event}.package_version is missing: no version to deploy` };
  return versionPush(event, delivery, pkg, pkg.package_version);
}

export function registerGitHubHook(scope: RoleServer, context: HookContext, secret: HookSecret): void {
  const verified = new WeakSet<FastifyRequest>();
  const { secret: key } = secret;
  useJsonBodies(scope, ['application/json', 'application/x-www-form-urlencoded'], (request, raw) => {
    if (key === undefined) return;
    const signature = request.headers['x-hub-signature-256'];
    if (typeof signature !== 'string') throw unauthorized('X-Hub-Signature-256 is missing: set the secret of the GitHub webhook');
    if (!githubSignatureValid(key, raw, signature)) throw unauthorized('X-Hub-Signature-256 does not match the body: the webhook secret differs from PLATFORM_GITHUB_WEBHOOK_SECRET');
    verified.add(request);
  });
  scope.post(
    '/hooks/github',
    {
      bodyLimit: context.bodyLimit,
      onRequest: hookAccess(secret, ROUTE, context.listenerLoopback),
      // A request without a body never met the parser, so never had its signature checked.
      preValidation: async (request) => {
        if (key !== undefined && !verified.has(request)) throw unauthorized('X-Hub-Signature-256 is missing: the body must be signed');
      },
      schema: {
        description:
          "GitHub's package / registry_package events: a published or updated container version with a tag deploys its digest; " +
          'any other event is answered 200 with the reason it deploys nothing, and journaled (webhook.ignored). ' +
          'Verified with X-Hub-Signature-256 (HMAC-SHA256 with PLATFORM_GITHUB_WEBHOOK_SECRET), deduplicated on X-GitHub-Delivery.',
        headers: GitHubHeaders,
        body: GitHubPayload,
        response: { 200: WebhookReply, 202: WebhookReply, ...errorResponses, 401: ErrorReply, 403: ErrorReply, 413: ErrorReply },
      },
    },
    async (request, reply) => {
      const { 'x-github-event': event, 'x-github-delivery': delivery } = request.headers;
      const outcome = gitHubPush(event, delivery, request.body);
      if ('push' in outcome) {
        const result = await dispatchPushes(context.dispatch, [outcome.push], 0);
        return reply.status(result.statusCode).send(result);
      }
      await appendJournal(context.dispatch.store, { kind: 'webhook.ignored', message: `github ${event} delivery ${delivery} deploys nothing: ${outcome.ignored}` });
      return dispatchPushes(context.dispatch, [], 1, outcome.ignored);
    },
  );
}
