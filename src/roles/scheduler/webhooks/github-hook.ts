import type { FastifyRequest } from 'fastify';
import type { RoleServer } from '../../../http/server.js';
import { badRequest, unauthorized } from '../../../http/errors.js';
import { parseImageReference } from '../../../image-reference.js';
import { IMAGE_REFERENCE } from '../../../schemas/image.js';
import { ErrorReply, errorResponses } from '../../../schemas/common.js';
import { GitHubHeaders, GitHubPayload, WebhookReply, type GitHubPackage } from '../../../schemas/webhooks.js';
import { githubSignatureValid, hookAccess, type HookSecret } from './auth.js';
import { dispatchPushes, type HookContext } from './dispatch.js';
import { pushedRepository, type Push } from './matching.js';
import { useJsonBodies } from './json-body.js';

// POST /hooks/github: GitHub's `package` and `registry_package` events for container images
// (GHCR). Verified with X-Hub-Signature-256, an HMAC-SHA256 of the raw body, before the body is
// even parsed; deduplicated on X-GitHub-Delivery, which GitHub keeps when it redelivers.

const ROUTE = 'POST /hooks/github';
const SHA256 = /^sha256:[a-f0-9]{64}$/;
const TAG = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;
const imageReference = new RegExp(IMAGE_REFERENCE);
/** GitHub writes 0001-01-01 for times it does not know. */
const YEAR_2000 = Date.UTC(2000, 0, 1);

export type GitHubOutcome = { push: Push } | { ignored: string };

function pushedAtOf(pkg: GitHubPackage): number {
  const version = pkg.package_version;
  for (const time of [version?.updated_at, version?.created_at, pkg.updated_at]) {
    const ms = Date.parse(time ?? '');
    if (Number.isFinite(ms) && ms > YEAR_2000) return Math.floor(ms / 1000);
  }
  return 0;
}

/** ghcr.io/owner/name from package_url when GitHub sends it, else from the namespace and name. */
function repositoryOf(pkg: GitHubPackage, field: string) {
  const url = pkg.package_version?.package_url?.toLowerCase();
  if (url) {
    if (!imageReference.test(url)) throw badRequest(`${field}.package_version.package_url must be an image reference such as ghcr.io/owner/name:tag`);
    const parsed = parseImageReference(url);
    return pushedRepository(parsed.registry, parsed.repository);
  }
  const owner = pkg.namespace ?? pkg.owner?.login;
  if (!owner) throw badRequest(`${field}.namespace (or package_version.package_url) is required to name the image`);
  const reference = `ghcr.io/${owner}/${pkg.name}`.toLowerCase();
  if (!imageReference.test(reference)) throw badRequest(`${field}.name and namespace must form an image reference, got ${reference}`);
  return pushedRepository('ghcr.io', reference.slice('ghcr.io/'.length));
}

/** The push a GitHub event reports, or why it deploys nothing. */
export function gitHubPush(event: string, delivery: string, payload: GitHubPayload): GitHubOutcome {
  if (event === 'ping') return { ignored: 'ping: the hook reaches the platform' };
  if (event !== 'package' && event !== 'registry_package') return { ignored: `${event} events deploy nothing (subscribe to package or registry_package)` };
  const pkg = payload[event];
  if (!pkg) throw badRequest(`${event} is required in a ${event} event`);
  if (payload.action !== 'published') return { ignored: `${event} ${payload.action ?? 'without an action'}: only published versions deploy` };
  const type = (pkg.package_type ?? '').toLowerCase();
  if (type !== 'container' && type !== 'docker') return { ignored: `a ${pkg.package_type ?? 'untyped'} package is not a container image` };
  const version = pkg.package_version;
  if (!version) throw badRequest(`${event}.package_version is required in a published container event`);
  const tag = version.container_metadata?.tag?.name || undefined;
  if (tag !== undefined && !TAG.test(tag)) throw badRequest(`${event}.package_version.container_metadata.tag.name must be a tag, got ${tag}`);
  const digest = version.container_metadata?.tag?.digest || [version.version, version.name].find((value) => SHA256.test(value ?? ''));
  const image = { ...repositoryOf(pkg, event), ...(tag ? { tag } : {}), ...(digest ? { digest } : {}) };
  return { push: { hook: 'github', event: delivery, image, pushedAt: pushedAtOf(pkg) } };
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
          "GitHub's package / registry_package events (action published, container images): deploys the pushed digest. " +
          'Verified with X-Hub-Signature-256 (HMAC-SHA256 with PLATFORM_GITHUB_WEBHOOK_SECRET), deduplicated on X-GitHub-Delivery.',
        headers: GitHubHeaders,
        body: GitHubPayload,
        response: { 200: WebhookReply, 202: WebhookReply, ...errorResponses, 401: ErrorReply, 403: ErrorReply, 413: ErrorReply },
      },
    },
    async (request, reply) => {
      const outcome = gitHubPush(request.headers['x-github-event'], request.headers['x-github-delivery'], request.body);
      const result = 'push' in outcome ? await dispatchPushes(context.dispatch, [outcome.push], 0) : await dispatchPushes(context.dispatch, [], 1, outcome.ignored);
      return reply.status(result.statusCode).send(result);
    },
  );
}
