import type { RoleServer } from '../../../http/server.js';
import { badRequest } from '../../../http/errors.js';
import { ErrorReply, errorResponses } from '../../../schemas/common.js';
import { RegistryEnvelope, WebhookReply, type RegistryEvent } from '../../../schemas/webhooks.js';
import { hookAccess, type HookSecret } from './auth.js';
import { bearerToken } from '../../../auth/caller.js';
import { dispatchPushes, type HookContext } from './dispatch.js';
import { pushedRepository, type Push } from './matching.js';
import { useJsonBodies } from './json-body.js';
import { IMAGE_TAG, IMAGE_TAG_RULE } from '../../../schemas/image.js';

// POST /hooks/registry: notifications of a Docker Registry v2 / Distribution registry. Only pushes
// of manifests count; blob pushes, pulls, mounts and deletes are acknowledged and ignored, since a
// registry retries anything but a 2xx for as long as it runs.

export const REGISTRY_EVENTS_TYPE = 'application/vnd.docker.distribution.events.v1+json';
const ROUTE = 'POST /hooks/registry';

const MANIFEST_TYPES = new Set([
  'application/vnd.docker.distribution.manifest.v2+json',
  'application/vnd.docker.distribution.manifest.list.v2+json',
  'application/vnd.docker.distribution.manifest.v1+json',
  'application/vnd.docker.distribution.manifest.v1+prettyjws',
  'application/vnd.oci.image.manifest.v1+json',
  'application/vnd.oci.image.index.v1+json',
]);
const SHA256 = /^sha256:[a-f0-9]{64}$/;
const TAG = new RegExp(IMAGE_TAG);

const isManifest = (target: NonNullable<RegistryEvent['target']>): boolean =>
  MANIFEST_TYPES.has(target.mediaType ?? '') || /\/manifests\//.test(target.url ?? '');

/** The registry host of an event: the Host the client pushed to, else the host of the target's URL. */
function hostOf(event: RegistryEvent): string | undefined {
  if (event.request?.host) return event.request.host;
  try {
    return event.target?.url ? new URL(event.target.url).host : undefined;
  } catch {
    return undefined;
  }
}

const seconds = (timestamp: string | undefined): number => {
  const ms = Date.parse(timestamp ?? '');
  return Number.isFinite(ms) && ms > 0 ? Math.floor(ms / 1000) : 0;
};

/** The manifest pushes of an envelope, in order, and how many events were something else. */
export function registryPushes(envelope: RegistryEnvelope): { pushes: Push[]; ignored: number } {
  const pushes: Push[] = [];
  envelope.events.forEach((event, index) => {
    const target = event.target;
    if (event.action !== 'push' || !target || !isManifest(target)) return;
    const field = (name: string) => `events.${index}.${name}`;
    if (!target.repository) throw badRequest(`${field('target.repository')} is required for a manifest push`);
    const host = hostOf(event);
    if (!host) throw badRequest(`${field('request.host')} is required for a manifest push (or a target.url naming the registry)`);
    if (!target.digest || !SHA256.test(target.digest)) throw badRequest(`${field('target.digest')} must be a digest: sha256: and 64 lowercase hex digits`);
    // The tag becomes part of the image reference every release and unit of the service records.
    if (target.tag && !TAG.test(target.tag)) throw badRequest(`${field('target.tag')} must be ${IMAGE_TAG_RULE}`);
    pushes.push({
      hook: 'registry',
      event: event.id,
      image: { ...pushedRepository(host, target.repository), ...(target.tag ? { tag: target.tag } : {}), digest: target.digest },
      pushedAt: seconds(event.timestamp),
    });
  });
  return { pushes, ignored: envelope.events.length - pushes.length };
}

export function registerRegistryHook(scope: RoleServer, context: HookContext, secret: HookSecret): void {
  useJsonBodies(scope, ['application/json', REGISTRY_EVENTS_TYPE]);
  scope.post(
    '/hooks/registry',
    {
      bodyLimit: context.bodyLimit,
      onRequest: hookAccess(secret, ROUTE, context.listenerLoopback, (request) => bearerToken(request.headers.authorization)),
      schema: {
        description:
          'Notifications of a Docker Registry v2 / Distribution registry (application/vnd.docker.distribution.events.v1+json). ' +
          'Manifest pushes deploy the pushed digest to services using the repository; other events are acknowledged and ignored. ' +
          'Authenticated with Authorization: Bearer <PLATFORM_REGISTRY_WEBHOOK_TOKEN>.',
        body: RegistryEnvelope,
        response: { 200: WebhookReply, 202: WebhookReply, ...errorResponses, 401: ErrorReply, 403: ErrorReply, 413: ErrorReply },
      },
    },
    async (request, reply) => {
      const { pushes, ignored } = registryPushes(request.body);
      const result = await dispatchPushes(context.dispatch, pushes, ignored);
      return reply.status(result.statusCode).send(result);
    },
  );
}
