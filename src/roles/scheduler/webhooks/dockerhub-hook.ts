import type { RoleServer } from '../../../http/server.js';
import { ErrorReply, errorResponses } from '../../../schemas/common.js';
import { DockerHubPayload, DockerHubQuery, WebhookReply } from '../../../schemas/webhooks.js';
import { DOCKER_HUB } from '../../../image-reference.js';
import { hookAccess, type HookSecret } from './auth.js';
import { dispatchPushes, type HookContext } from './dispatch.js';
import { pushedRepository, type Push } from './matching.js';
import { useJsonBodies } from './json-body.js';

// POST /hooks/dockerhub: Docker Hub's repository webhook. Docker Hub cannot sign its calls, so the
// secret travels in the URL (`?token=`). Its payload names a tag but no digest: the scheduler
// resolves the tag when it deploys.

const ROUTE = 'POST /hooks/dockerhub';

/**
 * The push a Docker Hub payload reports. Its identity, for repeated deliveries, is the repository,
 * tag and push time; a payload without a push time is not deduplicated (the scheduler's own
 * idempotency still turns a repeat of the same digest into "unchanged").
 */
export function dockerHubPush(payload: DockerHubPayload): Push {
  const { repo_name: repoName } = payload.repository;
  const { tag, pushed_at: pushedAt } = payload.push_data;
  const pushedAtSeconds = pushedAt === undefined ? 0 : Math.floor(pushedAt);
  return {
    hook: 'dockerhub',
    ...(pushedAt === undefined ? {} : { event: `${repoName}:${tag}@${pushedAt}` }),
    image: { ...pushedRepository(DOCKER_HUB, repoName), tag },
    pushedAt: pushedAtSeconds,
  };
}

export function registerDockerHubHook(scope: RoleServer, context: HookContext, secret: HookSecret): void {
  useJsonBodies(scope, ['application/json']);
  scope.post(
    '/hooks/dockerhub',
    {
      bodyLimit: context.bodyLimit,
      onRequest: hookAccess(secret, ROUTE, context.listenerLoopback, (request) => (request.query as { token?: string }).token),
      schema: {
        description: "Docker Hub's repository webhook: deploys the pushed tag to services using the repository. Authenticated with ?token=<PLATFORM_DOCKERHUB_WEBHOOK_TOKEN>.",
        querystring: DockerHubQuery,
        body: DockerHubPayload,
        response: { 200: WebhookReply, 202: WebhookReply, ...errorResponses, 401: ErrorReply, 403: ErrorReply, 413: ErrorReply },
      },
    },
    async (request, reply) => {
      const result = await dispatchPushes(context.dispatch, [dockerHubPush(request.body)], 0);
      return reply.status(result.statusCode).send(result);
    },
  );
}
