import { Type, type Static } from '@sinclair/typebox';
import { ServiceName, errorResponses, literalUnion, writeRefusals } from './common.js';
import { UnitActiveState, UnitSubState } from './cluster.js';
import { ImageReference } from './image.js';
import { ServiceConfig } from './service.js';
import { deploymentStates } from './states.js';
import { jobStates } from './job.js';

export const Release = Type.Object({
  service: Type.String(),
  version: Type.Integer({ minimum: 1 }),
  /** Image pinned to its digest at deploy time: registry/repository@sha256:… */
  image: Type.String(),
  digest: Type.String(),
  /** The tag the trigger named, if any. */
  tag: Type.Optional(Type.String()),
  config: ServiceConfig,
  pushedAt: Type.Integer(),
  /**
   * The time the trigger stands for, in Unix milliseconds: the push's time (a hook's event
   * timestamp, or pushedAt when a deploy request gives one), else the time the request was
   * received (a manual deploy with pushedAt 0, a rollback). A trigger older than the newest release's
   * is stale and deploys nothing.
   */
  triggeredAt: Type.Optional(Type.Integer()),
  /** The uuid of the declaration it was made for: a service declared again under the name does not inherit it. */
  serviceUuid: Type.Optional(Type.String()),
  deployment: Type.String(),
  /** Set when this release re-deploys an earlier one (rollback). */
  rollbackOf: Type.Optional(Type.Integer()),
  /** A rollback asked to run the release command again (a rollback does not, unless asked). */
  runReleaseCommand: Type.Optional(Type.Boolean()),
  createdAt: Type.String(),
});
export type Release = Static<typeof Release>;

export const DeploymentState = literalUnion(deploymentStates);
export type DeploymentState = Static<typeof DeploymentState>;

export const UnitProgress = Type.Object({
  unit: Type.String(),
  machine: Type.String(),
  active: UnitActiveState,
  sub: UnitSubState,
  error: Type.Optional(Type.String()),
});
export type UnitProgress = Static<typeof UnitProgress>;

/** A deployment's release command (docs/jobs.md): its job, how it runs, and its last lines. */
export const ReleaseCommandProgress = Type.Object({
  job: Type.String({ description: 'the job id: its whole kept output is `platform logs NAME --job ID`' }),
  machine: Type.String(),
  state: literalUnion(jobStates),
  exitCode: Type.Optional(Type.Integer()),
  /** The last lines of its output, at most RELEASE_COMMAND_LINES. */
  lines: Type.Array(Type.String()),
  lineCount: Type.Integer({ minimum: 0 }),
});
export type ReleaseCommandProgress = Static<typeof ReleaseCommandProgress>;

/** Lines of a release command's output a deployment record keeps (the job keeps more). */
export const RELEASE_COMMAND_LINES = 20;

export const Deployment = Type.Object({
  id: Type.String(),
  service: Type.String(),
  release: Type.Integer(),
  image: Type.String(),
  state: DeploymentState,
  trigger: Type.String({ description: 'manual | registry | dockerhub | github | rollback | revert | reschedule | stop (the units were stopped: the service runs nothing until the next deploy)' }),
  units: Type.Array(UnitProgress),
  /** Units the release runs (its numInstances): what `units` and the running count are measured against. Absent in records written before it existed. */
  wanted: Type.Optional(Type.Integer({ minimum: 0, description: "units the deployed release runs (its config's numInstances); 0 for a stop; absent in older records" })),
  reason: Type.Optional(Type.String()),
  createdAt: Type.String(),
  updatedAt: Type.String(),
  finishedAt: Type.Optional(Type.String()),
  /** A reschedule that keeps failing is one record, tried again with backoff: how often it was tried (absent: once). */
  attempts: Type.Optional(Type.Integer({ minimum: 1, description: 'how often healing tried this reschedule in its failure episode (absent: once)' })),
  /** When healing tries this failed reschedule again, unless something changes first (absent: it is not tried again). */
  retryAt: Type.Optional(Type.String({ description: 'when healing tries this failed reschedule again (absent: it is not retried)' })),
  releaseCommand: Type.Optional(ReleaseCommandProgress),
});
export type Deployment = Static<typeof Deployment>;

export { currentTarget } from './states.js';

/** POST /hooks/deploy (the seed's deploy request). */
export const DeployRequest = Type.Object(
  {
    serviceName: ServiceName,
    containerRepository: ImageReference,
    pushedAt: Type.Integer({ minimum: 0, description: 'Unix seconds of the push; 0: now (when the request is received); at most 5 minutes ahead of the scheduler\'s clock' }),
  },
  { additionalProperties: false },
);
export type DeployRequest = Static<typeof DeployRequest>;

export const DeployReply = Type.Object({
  statusCode: Type.Literal(200),
  /**
   * created: a new release is being deployed; unchanged: the same image and config are already
   * deployed or deploying (the reply names that deployment); stale: the trigger is a whole second
   * older than the one the newest release was made for, or than the service's declaration:
   * nothing happens (it is journaled as deployment.stale).
   */
  outcome: Type.Union([Type.Literal('created'), Type.Literal('unchanged'), Type.Literal('stale')]),
  service: Type.String(),
  release: Type.String({ description: 'v<version>' }),
  version: Type.Integer(),
  deployment: Type.String(),
  image: Type.String(),
  message: Type.String(),
});
export type DeployReply = Static<typeof DeployReply>;

/** POST /services/:name/deploy at the orchestrator: optionally a tag or a full reference. */
export const ManualDeployRequest = Type.Object(
  { containerRepository: Type.Optional(ImageReference) },
  { additionalProperties: false },
);
export type ManualDeployRequest = Static<typeof ManualDeployRequest>;

export const RollbackRequest = Type.Object(
  {
    version: Type.Union([Type.Integer({ minimum: 1 }), Type.String({ pattern: '^v?[1-9][0-9]{0,8}$' })], { description: 'a release version: 3, "3" or "v3"' }),
    runReleaseCommand: Type.Optional(Type.Boolean({ description: "true: run the release's releaseCommand before its units replace the running ones (a rollback does not by default)" })),
  },
  { additionalProperties: false },
);
export type RollbackRequest = Static<typeof RollbackRequest>;

export const versionNumber = (version: number | string): number => (typeof version === 'number' ? version : Number(version.replace(/^v/, '')));

/** Who made an API call that changed something (src/auth/audit.ts). */
export const JournalActor = Type.Object({
  /** The token's name; `local` for a call from this machine without one under --auth auto; absent under --auth none and on open routes. */
  token: Type.Optional(Type.String()),
  /** The socket address the call came from. */
  address: Type.Optional(Type.String()),
  /** The X-Forwarded-For the call carried (set by the orchestrator and the web role when they pass a call on), as claimed, unverified. */
  forwardedFor: Type.Optional(Type.String()),
});
export type JournalActor = Static<typeof JournalActor>;

export const JournalEntry = Type.Object({
  id: Type.String(),
  at: Type.String(),
  service: Type.Optional(ServiceName),
  deployment: Type.Optional(Type.String()),
  kind: Type.String(),
  message: Type.String(),
  actor: Type.Optional(JournalActor),
});
export type JournalEntry = Static<typeof JournalEntry>;

export const VersionParams = Type.Object({
  name: ServiceName,
  version: Type.String({ pattern: '^v?[1-9][0-9]{0,8}$', description: 'a release version: v1, v2, … (or 1, 2, …)' }),
});
export type VersionParams = Static<typeof VersionParams>;

// Route schemas the scheduler serves and the orchestrator forwards: written once, used by both.

export const listDeploymentsSchema = {
  description: 'Deployments, newest first.',
  querystring: Type.Object({ service: Type.Optional(ServiceName) }, { additionalProperties: false }),
  response: { 200: Type.Array(Deployment), ...errorResponses },
};

export const getDeploymentSchema = {
  params: Type.Object({ id: Type.String({ pattern: '^[a-z0-9-]{1,64}$', description: 'a deployment id' }) }),
  response: { 200: Deployment, ...errorResponses },
};

export const journalSchema = {
  description: 'The journal of events, newest first; page back with `before` (an entry id).',
  querystring: Type.Object(
    {
      limit: Type.Integer({ minimum: 1, maximum: 500, default: 50 }),
      before: Type.Optional(Type.String({ pattern: '^[a-z0-9-]{1,64}$' })),
      service: Type.Optional(ServiceName),
    },
    { additionalProperties: false },
  ),
  response: { 200: Type.Array(JournalEntry), ...errorResponses },
};

export const rollbackSchema = {
  description: "Deploy an earlier release's digest and config as a new release that records where it came from.",
  body: RollbackRequest,
  response: { 200: DeployReply, ...errorResponses, ...writeRefusals },
};
