import { Command, JobDuration } from './command.js';
import { Type, type Static } from '@sinclair/typebox';
import { ServiceName } from './common.js';
import { ImageReference } from './image.js';
import { scheduleFields } from './schedule.js';

// The service declaration, as the directory stores it and as the orchestrator presents it.

export const PortNumber = Type.Integer({ minimum: 1, maximum: 65535, description: 'an integer from 1 to 65535' });

/**
 * Ports the platform itself listens on by default: the roles (9000-9004), the gateway's HTTP,
 * internal and HTTPS listeners (8080, 8081, 8443) and etcd's client and peer ports (2379, 2380;
 * 4001, 7001 in the specification's layout). A unit bound to one would take the platform's
 * traffic (a gateway's requests, credentials included), so no unit may ask for one as its host
 * port; ports of roles moved elsewhere are refused by the planner and the agent (machine records).
 */
export const PLATFORM_PORTS: readonly number[] = [2379, 2380, 4001, 7001, 8080, 8081, 8443, 9000, 9001, 9002, 9003, 9004];

/** The port of an announced `host:port` (a role's address), or undefined when it names none. */
export function portOfAddress(address: string): number | undefined {
  const port = Number(address.slice(address.lastIndexOf(':') + 1));
  return Number.isInteger(port) && port >= 1 && port <= 65535 ? port : undefined;
}

/** The ports of the roles' announced addresses (`/platform/services/<component>` values). */
export const announcedPorts = (addresses: readonly string[]): number[] =>
  addresses.map(portOfAddress).filter((port): port is number => port !== undefined);

export const HostPortNumber = Type.Integer({
  minimum: 1,
  maximum: 65535,
  not: { enum: [...PLATFORM_PORTS] },
  description: `an integer from 1 to 65535 that is no platform port (${PLATFORM_PORTS.join(', ')})`,
});

export const PortMapping = Type.Object(
  {
    container: PortNumber,
    host: Type.Optional(HostPortNumber),
  },
  { additionalProperties: false },
);
export type PortMapping = Static<typeof PortMapping>;

export const ENV_NAME = '^[A-Za-z_][A-Za-z0-9_]*$';
export const Env = Type.Record(Type.String({ pattern: ENV_NAME }), Type.String({ maxLength: 65536 }), {
  additionalProperties: false,
  maxProperties: 1000,
  description: 'a map of POSIX environment variable names (letters, digits, "_", not starting with a digit) to strings',
});
export type Env = Static<typeof Env>;

export const NumInstances = Type.Integer({ minimum: 0, maximum: 1000, description: 'an integer from 0 to 1000' });

export const AutoDeploy = Type.Union([Type.Literal('always'), Type.Literal('never')], {
  description: '"always" (registry pushes deploy) or "never" (only manual deploys)',
});

export const ConflictsWith = Type.String({
  pattern: '^([a-z0-9*-]{1,63})?$',
  description: 'a glob over service names of up to 63 characters: lowercase letters, digits, "-" and "*" wildcards (empty for none)',
  examples: ['web-*'],
});

export const Description = Type.String({ maxLength: 1024, description: 'free text, up to 1024 characters' });

const seconds = (min: number, max: number) => Type.Integer({ minimum: min, maximum: max, description: `an integer number of seconds from ${min} to ${max}` });

/** How a deploy replaces units, and how units stop. Optional in the config; defaults below. */
const rolloutFields = {
  maxSurge: Type.Integer({ minimum: 0, maximum: 100, description: 'an integer from 0 to 100: units started above numInstances during a rollout' }),
  maxUnavailable: Type.Integer({ minimum: 0, maximum: 100, description: 'an integer from 0 to 100: units that may be down during a rollout' }),
  minReadySeconds: seconds(0, 3600),
  progressDeadlineSeconds: seconds(5, 3600),
  autoRevert: Type.Boolean({ description: 'true or false: redeploy the last good release when a deployment fails' }),
  stopGraceSeconds: seconds(0, 3600),
  healthCheck: Type.Object(
    { path: Type.String({ pattern: '^/[\\x21-\\x7e]{0,1023}$', description: 'an absolute URL path such as /healthz' }) },
    { additionalProperties: false },
  ),
  rollout: Type.Object(
    {
      strategy: Type.Optional(
        Type.Unsafe<RolloutStrategy>({
          type: 'string',
          enum: ['rolling', 'handover'],
          description:
            '"rolling" (the default: new units start beside the old ones) or "handover" (for a single-writer service: per unit, the gateways hold its requests, the old unit stops, the new one starts on the same volumes, the held requests go to it)',
        }),
      ),
      handoverTimeout: Type.Optional(seconds(1, 600)),
    },
    { additionalProperties: false, description: '{strategy?, handoverTimeout?}: how a deploy replaces units' },
  ),
};
export type RolloutStrategy = 'rolling' | 'handover';
/**
 * What one unit of the service reserves on its machine: the planner only places it where that
 * much is free, and the agent gives its container these limits (memory with no extra swap).
 */
export const Resources = Type.Object(
  {
    memoryMB: Type.Optional(Type.Integer({ minimum: 6, maximum: 1_048_576, description: 'an integer number of megabytes from 6 (the least Docker accepts) to 1048576 (1 TiB)' })),
    cpus: Type.Optional(Type.Number({ minimum: 0.01, maximum: 1024, description: 'a number of CPUs from 0.01 to 1024, e.g. 0.5' })),
  },
  { additionalProperties: false, minProperties: 1, description: 'memoryMB and/or cpus' },
);
export type Resources = Static<typeof Resources>;

/** A string of a few words, as one `enum`: a failure names the words (a union of literals reports only "equal to constant"). */
const oneOf = <T extends string>(words: readonly T[], description: string) => Type.Unsafe<T>({ type: 'string', enum: [...words], description });

export const Placement = oneOf(['spread', 'binpack'], '"spread" (each unit on the least used machine; the default) or "binpack" (the most used machine that has room, so one fills before the next)');
export type Placement = Static<typeof Placement>;

/** Docker volume names allow more; this keeps `<service>.<instance>.<name>` readable and unambiguous (no dot). */
export const VolumeName = Type.String({ pattern: '^[a-z0-9][a-z0-9_-]{0,62}$', description: '1-63 lowercase letters, digits, "_" or "-", starting with a letter or digit' });
/** Absolute, every segment a plain name: no `.` or `..` segment, no `:` (Docker's mount syntax), no spaces. */
export const VolumePath = Type.String({
  pattern: '^(/(?!\\.\\.?(/|$))[A-Za-z0-9._@+-]+)+$',
  maxLength: 1024,
  description: 'an absolute path in the container such as /data: segments of letters, digits, ".", "_", "@", "+" or "-", none of them "." or ".."',
});
export const Volume = Type.Object({ name: VolumeName, path: VolumePath }, { additionalProperties: false });
export type Volume = Static<typeof Volume>;
export const Volumes = Type.Array(Volume, { maxItems: 16, description: 'up to 16 named volumes, each {name, path}' });

export const VolumeMove = oneOf(['never', 'allowed'], '"never" (the default: a unit whose machine is lost stays there, failed, with its data) or "allowed" (it is placed elsewhere with new, empty volumes)');

/** The next config: what the next deploy uses. */
export const ServiceConfig = Type.Object(
  {
    numInstances: NumInstances,
    ports: Type.Array(PortMapping, { maxItems: 32 }),
    env: Env,
    maxSurge: Type.Optional(rolloutFields.maxSurge),
    maxUnavailable: Type.Optional(rolloutFields.maxUnavailable),
    minReadySeconds: Type.Optional(rolloutFields.minReadySeconds),
    progressDeadlineSeconds: Type.Optional(rolloutFields.progressDeadlineSeconds),
    autoRevert: Type.Optional(rolloutFields.autoRevert),
    stopGraceSeconds: Type.Optional(rolloutFields.stopGraceSeconds),
    healthCheck: Type.Optional(rolloutFields.healthCheck),
    rollout: Type.Optional(rolloutFields.rollout),
    resources: Type.Optional(Resources),
    placement: Type.Optional(Placement),
    volumes: Type.Optional(Volumes),
    volumeMove: Type.Optional(VolumeMove),
    releaseCommand: Type.Optional(Command),
    releaseCommandTimeout: Type.Optional(JobDuration),
    schedule: Type.Optional(scheduleFields.schedule),
    timeZone: Type.Optional(scheduleFields.timeZone),
    concurrency: Type.Optional(scheduleFields.concurrency),
    timeout: Type.Optional(JobDuration),
    command: Type.Optional(Command),
  },
  { additionalProperties: false },
);
export type ServiceConfig = Static<typeof ServiceConfig>;

export const rolloutDefaults = {
  maxSurge: 1,
  maxUnavailable: 0,
  minReadySeconds: 0,
  progressDeadlineSeconds: 120,
  autoRevert: true,
  stopGraceSeconds: 10,
  strategy: 'rolling',
  handoverTimeout: 30,
} as const;

/** Fields of the config that shape units and their placement rather than the rollout. */
type UnitShapeFields = 'numInstances' | 'ports' | 'env' | 'healthCheck' | 'resources' | 'placement' | 'volumes' | 'volumeMove';

/** Fields of the config about the release command a deploy runs first (docs/jobs.md). */
type ReleaseCommandFields = 'releaseCommand' | 'releaseCommandTimeout';

/** Fields of the config of a scheduled job (docs/jobs.md "Scheduled jobs"). */
type ScheduleFields = 'schedule' | 'timeZone' | 'concurrency' | 'timeout' | 'command';

/**
 * The long-lived units a release runs: none for a scheduled job (a service with `schedule`), whose
 * runs are jobs the leader starts at its ticks; numInstances otherwise.
 */
export const unitsWanted = (config: Pick<ServiceConfig, 'numInstances' | 'schedule'>): number => (config.schedule === undefined ? config.numInstances : 0);

export type RolloutSettings = Required<Omit<ServiceConfig, UnitShapeFields | ReleaseCommandFields | ScheduleFields | 'rollout'>> &
  Pick<ServiceConfig, 'healthCheck'> & { strategy: RolloutStrategy; handoverTimeoutSeconds: number };

export const rolloutSettings = (config: ServiceConfig): RolloutSettings => ({
  maxSurge: config.maxSurge ?? rolloutDefaults.maxSurge,
  maxUnavailable: config.maxUnavailable ?? rolloutDefaults.maxUnavailable,
  minReadySeconds: config.minReadySeconds ?? rolloutDefaults.minReadySeconds,
  progressDeadlineSeconds: config.progressDeadlineSeconds ?? rolloutDefaults.progressDeadlineSeconds,
  autoRevert: config.autoRevert ?? rolloutDefaults.autoRevert,
  stopGraceSeconds: config.stopGraceSeconds ?? rolloutDefaults.stopGraceSeconds,
  strategy: config.rollout?.strategy ?? rolloutDefaults.strategy,
  handoverTimeoutSeconds: config.rollout?.handoverTimeout ?? rolloutDefaults.handoverTimeout,
  ...(config.healthCheck ? { healthCheck: config.healthCheck } : {}),
});

/** A JSON merge patch of the config: keys set, `null` removes (env keys) or resets (others). */
export const ServiceConfigPatch = Type.Object(
  {
    numInstances: Type.Optional(Type.Union([NumInstances, Type.Null()])),
    ports: Type.Optional(Type.Union([Type.Array(PortMapping, { maxItems: 32 }), Type.Null()])),
    env: Type.Optional(
      Type.Union([
        Type.Record(Type.String({ pattern: ENV_NAME }), Type.Union([Type.String({ maxLength: 65536 }), Type.Null()]), {
          additionalProperties: false,
          description: 'a map of POSIX environment variable names to strings, or null to remove one',
        }),
        Type.Null(),
      ]),
    ),
    maxSurge: Type.Optional(Type.Union([rolloutFields.maxSurge, Type.Null()])),
    maxUnavailable: Type.Optional(Type.Union([rolloutFields.maxUnavailable, Type.Null()])),
    minReadySeconds: Type.Optional(Type.Union([rolloutFields.minReadySeconds, Type.Null()])),
    progressDeadlineSeconds: Type.Optional(Type.Union([rolloutFields.progressDeadlineSeconds, Type.Null()])),
    autoRevert: Type.Optional(Type.Union([rolloutFields.autoRevert, Type.Null()])),
    stopGraceSeconds: Type.Optional(Type.Union([rolloutFields.stopGraceSeconds, Type.Null()])),
    healthCheck: Type.Optional(Type.Union([rolloutFields.healthCheck, Type.Null()])),
    rollout: Type.Optional(Type.Union([rolloutFields.rollout, Type.Null()])),
    resources: Type.Optional(Type.Union([Resources, Type.Null()])),
    placement: Type.Optional(Type.Union([Placement, Type.Null()])),
    volumes: Type.Optional(Type.Union([Volumes, Type.Null()])),
    volumeMove: Type.Optional(Type.Union([VolumeMove, Type.Null()])),
    releaseCommand: Type.Optional(Type.Union([Command, Type.Null()])),
    releaseCommandTimeout: Type.Optional(Type.Union([JobDuration, Type.Null()])),
    schedule: Type.Optional(Type.Union([scheduleFields.schedule, Type.Null()])),
    timeZone: Type.Optional(Type.Union([scheduleFields.timeZone, Type.Null()])),
    concurrency: Type.Optional(Type.Union([scheduleFields.concurrency, Type.Null()])),
    timeout: Type.Optional(Type.Union([JobDuration, Type.Null()])),
    command: Type.Optional(Type.Union([Command, Type.Null()])),
  },
  { additionalProperties: false, minProperties: 1 },
);
export type ServiceConfigPatch = Static<typeof ServiceConfigPatch>;

/** Whether the service's units stay on their machine even when it is lost: their data is there. */
export const keepsUnitsWithVolumes = (config: Pick<ServiceConfig, 'volumes' | 'volumeMove'>): boolean =>
  (config.volumes?.length ?? 0) > 0 && config.volumeMove !== 'allowed';

export const defaultConfig = (): ServiceConfig => ({ numInstances: 1, ports: [], env: {} });

const declarationFields = {
  description: Type.Optional(Description),
  autoDeploy: Type.Optional(AutoDeploy),
  conflictsWith: Type.Optional(ConflictsWith),
  loadBalanced: Type.Optional(Type.Boolean()),
  publicFacing: Type.Optional(Type.Boolean()),
  numInstances: Type.Optional(NumInstances),
  ports: Type.Optional(Type.Array(PortMapping, { maxItems: 32 })),
  env: Type.Optional(Env),
  resources: Type.Optional(Resources),
  placement: Type.Optional(Placement),
  volumes: Type.Optional(Volumes),
  volumeMove: Type.Optional(VolumeMove),
};

/** POST /services at the service directory (the seed's service-directory form). */
export const DirectoryServiceCreate = Type.Object(
  {
    name: ServiceName,
    containerImage: ImageReference,
    ...declarationFields,
  },
  { additionalProperties: false },
);
export type DirectoryServiceCreate = Static<typeof DirectoryServiceCreate>;

/** POST /services at the orchestrator (the seed's orchestrator form). */
export const OrchestratorServiceCreate = Type.Object(
  {
    name: ServiceName,
    containerRepository: ImageReference,
    ...declarationFields,
  },
  { additionalProperties: false },
);
export type OrchestratorServiceCreate = Static<typeof OrchestratorServiceCreate>;

/** PATCH /services/:name at the directory: a merge patch of the declaration (not the config). */
export const ServicePatch = Type.Object(
  {
    description: Type.Optional(Description),
    containerImage: Type.Optional(ImageReference),
    autoDeploy: Type.Optional(AutoDeploy),
    conflictsWith: Type.Optional(ConflictsWith),
    loadBalanced: Type.Optional(Type.Boolean()),
    publicFacing: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false, minProperties: 1 },
);
export type ServicePatch = Static<typeof ServicePatch>;

export const Service = Type.Object(
  {
    name: ServiceName,
    uuid: Type.String({ format: 'uuid' }),
    description: Type.String(),
    containerImage: Type.String(),
    autoDeploy: AutoDeploy,
    conflictsWith: Type.String(),
    loadBalanced: Type.Boolean(),
    publicFacing: Type.Boolean(),
    config: ServiceConfig,
    createdAt: Type.String({ format: 'date-time' }),
    updatedAt: Type.String({ format: 'date-time' }),
  },
  { $id: 'Service' },
);
export type Service = Static<typeof Service>;

export const CreatedReply = Type.Object({
  meta: Type.Object({
    statusCode: Type.Literal(201),
    ok: Type.Literal(true),
    uuid: Type.String(),
    name: Type.String(),
  }),
});
export type CreatedReply = Static<typeof CreatedReply>;

/** DELETE /services/:name: volumes stay (a service declared again under the name finds them) unless asked. */
export const ServiceDeleteQuery = Type.Object(
  { volumes: Type.Optional(oneOf(['keep', 'delete'], '"keep" (the default) or "delete": remove the units\' named volumes on every machine')) },
  { additionalProperties: false },
);
export type ServiceDeleteQuery = Static<typeof ServiceDeleteQuery>;

/** What an agent removed of a deleted service's volumes. */
export const RemovedVolumes = Type.Object({ machine: Type.String(), removed: Type.Array(Type.String()) });
export type RemovedVolumes = Static<typeof RemovedVolumes>;

export const ServiceListQuery = Type.Object(
  { containerImage: Type.Optional(Type.String({ maxLength: 512 })) },
  { additionalProperties: false },
);
export type ServiceListQuery = Static<typeof ServiceListQuery>;
