import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { IMAGE_TAG, IMAGE_TAG_RULE } from './image.js';

// Registry webhooks: the payloads the platform accepts from a Distribution registry, Docker Hub
// and GitHub, and what it answers. Senders add fields over time, so payloads accept unknown
// fields; only what the platform reads is required.

const text = (description: string, maxLength = 1024) => Type.String({ maxLength, description });
const PATH_COMPONENT = '[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*';

/** One event of a Distribution notification envelope (application/vnd.docker.distribution.events.v1+json). */
export const RegistryEvent = Type.Object({
  id: text('the event id, unique per event', 256),
  timestamp: Type.Optional(text('RFC 3339', 64)),
  action: text('push, pull, mount or delete', 64),
  target: Type.Optional(
    Type.Object({
      mediaType: Type.Optional(text('the media type of the manifest or blob', 256)),
      digest: Type.Optional(Type.String({ maxLength: 256 })),
      repository: Type.Optional(text('the repository path inside the registry', 512)),
      tag: Type.Optional(text('the tag a manifest was pushed with', 256)),
      url: Type.Optional(text('the URL of the manifest or blob', 2048)),
    }),
  ),
  request: Type.Optional(Type.Object({ host: Type.Optional(text('the registry host the client pushed to', 512)) })),
});
export type RegistryEvent = Static<typeof RegistryEvent>;

export const RegistryEnvelope = Type.Object({
  events: Type.Array(RegistryEvent, { maxItems: 1000, description: 'an array of up to 1000 notification events' }),
});
export type RegistryEnvelope = Static<typeof RegistryEnvelope>;

/** Docker Hub's repository webhook. */
export const DockerHubPayload = Type.Object({
  callback_url: Type.Optional(text('Docker Hub callback URL', 2048)),
  push_data: Type.Object({
    tag: Type.String({ pattern: IMAGE_TAG, description: IMAGE_TAG_RULE }),
    pushed_at: Type.Optional(Type.Number({ minimum: 0, description: 'Unix seconds' })),
  }),
  repository: Type.Object({
    repo_name: Type.String({
      pattern: `^${PATH_COMPONENT}(?:/${PATH_COMPONENT})*$`,
      maxLength: 256,
      description: 'a repository: namespace/name in lowercase letters, digits and separators',
    }),
  }),
});
export type DockerHubPayload = Static<typeof DockerHubPayload>;

const nullable = <T extends TSchema>(schema: T) => Type.Optional(Type.Union([schema, Type.Null()]));
const time = nullable(Type.String({ maxLength: 64 }));

/**
 * What the GitHub hook reads of a package: GitHub leaves out or nulls most fields for some package
 * types and versions, so nearly all are optional and digests are any text (the hook decides which
 * are digests).
 */
const GitHubPackage = Type.Object({
  name: nullable(text('the package name', 256)),
  namespace: nullable(text('the owner', 256)),
  package_type: nullable(text('CONTAINER, docker, npm, …', 64)),
  updated_at: time,
  owner: nullable(Type.Object({ login: nullable(Type.String({ maxLength: 256 })) })),
  package_version: nullable(
    Type.Object({
      version: nullable(Type.String({ maxLength: 256 })),
      name: nullable(Type.String({ maxLength: 256 })),
      package_url: nullable(text('registry/owner/name:tag, or registry/owner/name: for an untagged version', 1024)),
      created_at: time,
      updated_at: time,
      container_metadata: nullable(
        Type.Object({
          tag: nullable(
            Type.Object({
              name: nullable(Type.String({ maxLength: 256 })),
              digest: nullable(Type.String({ maxLength: 256 })),
            }),
          ),
        }),
      ),
    }),
  ),
});
export type GitHubPackage = Static<typeof GitHubPackage>;

/** A `package` or `registry_package` event, as far as the GitHub hook reads it. */
export const GitHubPackageEvent = Type.Object({
  action: nullable(text('published, updated, …', 64)),
  package: nullable(GitHubPackage),
  registry_package: nullable(GitHubPackage),
});
export type GitHubPackageEvent = Static<typeof GitHubPackageEvent>;

/**
 * The body of a GitHub delivery: any JSON object. A delivery that does not describe a deployable
 * container version (another event, an untagged version, a field GitHub left out) is answered 200
 * with the reason, so only a body that is not a JSON object is a 400.
 */
export const GitHubPayload = Type.Object(
  {
    action: Type.Optional(Type.Unknown({ description: 'published, updated, …' })),
    package: Type.Optional(Type.Unknown({ description: 'the package of a package event (see GitHubPackageEvent)' })),
    registry_package: Type.Optional(Type.Unknown({ description: 'the package of a registry_package event' })),
  },
  { description: "a GitHub webhook event: any JSON object; the package events' fields the platform reads are listed" },
);
export type GitHubPayload = Static<typeof GitHubPayload>;

export const GitHubHeaders = Type.Object({
  'x-github-event': Type.String({ pattern: '^[a-z_]{1,64}$', description: 'a GitHub event name such as package' }),
  'x-github-delivery': Type.String({ pattern: '^[A-Za-z0-9-]{1,128}$', description: 'a delivery GUID' }),
});

export const DockerHubQuery = Type.Object({ token: Type.Optional(Type.String({ maxLength: 1024 })) });

export const WebhookServiceOutcome = Type.Object({
  service: Type.String(),
  action: Type.Union([Type.Literal('deploying'), Type.Literal('recorded'), Type.Literal('skipped')], {
    description: 'deploying: a deploy runs in the background; recorded: autoDeploy is never, the push is journaled; skipped: see reason',
  }),
  reason: Type.String(),
});
export type WebhookServiceOutcome = Static<typeof WebhookServiceOutcome>;

export const WebhookPushOutcome = Type.Object({
  event: Type.String({ description: 'the event or delivery id the push came with' }),
  image: Type.String({ description: 'what was pushed: registry/repository[:tag][@digest]' }),
  duplicate: Type.Boolean({ description: 'true when this event was already handled: nothing was done again' }),
  services: Type.Array(WebhookServiceOutcome, { description: 'the declared services using the repository; empty when none does' }),
});
export type WebhookPushOutcome = Static<typeof WebhookPushOutcome>;

export const WebhookReply = Type.Object({
  statusCode: Type.Union([Type.Literal(200), Type.Literal(202)], { description: '202 when a deploy was started, 200 otherwise' }),
  message: Type.String(),
  pushes: Type.Array(WebhookPushOutcome),
  ignored: Type.Integer({ description: 'events that are not pushes of a manifest (blob pushes, pulls, deletes, other GitHub events)' }),
});
export type WebhookReply = Static<typeof WebhookReply>;
