import type { ContainerCreateOptions, HostConfig, MountSettings } from 'dockerode';
import type { Assignment } from '../../schemas/cluster.js';
import type { UnitLogRotation } from '../../config.js';

// What a unit's container looks like: named after the unit, labelled so any agent (this one after
// a restart included) can tell whose it is and what it runs (its slot: unit and spec), and given
// the unit's environment. Nothing else: no host paths, no host PID or IPC namespace, no device,
// never privileged, and no way to gain privileges (setuid binaries, file capabilities) once started.
// Its declared limits (memory, CPUs) are added by their own helper below, its named volumes by
// unit-volumes.ts: always a Docker named volume the agent names itself, never a host path.

export type NetworkMode = 'bridge' | 'host';

export const labels = {
  managed: 'platform.managed',
  machine: 'platform.machine',
  service: 'platform.service',
  unit: 'platform.unit',
  instance: 'platform.instance',
  release: 'platform.release',
  spec: 'platform.spec',
  stopGrace: 'platform.stop-grace',
  deployment: 'platform.deployment',
  port: 'platform.port',
  image: 'platform.image',
  volume: 'platform.volume',
} as const;

/** The Docker label filters that select exactly one machine's unit containers. */
export const machineLabelFilters = (machineId: string): string[] => [`${labels.managed}=true`, `${labels.machine}=${machineId}`];

/** The container port the unit listens on in bridge mode when the service maps none. */
export const defaultContainerPort = 8080;

export interface UnitContainerSpec {
  assignment: Assignment;
  machineId: string;
  network: NetworkMode;
  /** The port the unit listens on (`PORT`): a host port in host mode, a container port in bridge mode. */
  port: number;
  /** Bridge mode: the host port to publish on; undefined lets Docker choose. */
  hostPort?: number;
  /** How much of the unit's output the engine keeps; none: the engine's own default (unbounded json-file). */
  logs?: UnitLogRotation;
  /** The unit's named volumes (unit-volumes.ts), checked as its own. */
  mounts?: MountSettings[];
  /** `uid[:gid]` the unit runs as instead of the image's user (host networking: not root on the host's ports). */
  user?: string;
  /** The memory limit of a unit whose assignment declares none (--default-memory-limit); undefined: none. */
  defaultMemoryMB?: number;
}

/**
 * Docker's json-file driver with rotation, so a chatty unit cannot fill its machine's disk. It is
 * named, not left to the engine's default: `platform logs` reads the output back through the
 * engine, which the json-file driver serves (and follows across rotations); a daemon default of
 * journald or syslog would keep no bound here.
 */
export const unitLogConfig = ({ maxSize, maxFiles }: UnitLogRotation): HostConfig['LogConfig'] => ({
  Type: 'json-file',
  Config: { 'max-size': maxSize, 'max-file': String(maxFiles) },
});

export function unitEnvironment(assignment: Assignment, port: number): string[] {
  const env: Record<string, string> = {
    ...assignment.env,
    PORT: String(port),
    PLATFORM_SERVICE: assignment.service,
    PLATFORM_UNIT: assignment.unit,
    PLATFORM_RELEASE: `v${assignment.release}`,
  };
  return Object.entries(env).map(([name, value]) => `${name}=${value}`);
}

/**
 * The capabilities a unit keeps: Docker's default set without NET_RAW (forged packets to its
 * neighbours), MKNOD (device nodes), AUDIT_WRITE and SETFCAP (granting file capabilities). Everything
 * else is dropped, so an engine whose defaults are wider gives no more. What remains lets ordinary
 * images work as they do elsewhere: bind port 80 in their own network, chown their files at
 * start, and drop from root to their own user.
 */
export const unitCapabilities: readonly string[] = ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'FSETID', 'KILL', 'SETGID', 'SETUID', 'SETPCAP', 'NET_BIND_SERVICE', 'SYS_CHROOT'];

/**
 * Processes (threads included) a unit may run at once. Without a limit one fork bomb in one unit
 * exhausts the machine's PIDs and stops every other unit and the agent from starting anything.
 * 1024 leaves room for what a service runs (a JVM or a worker pool uses a few hundred threads)
 * while a runaway unit stops well short of the machine's limit. Declarations carry no resources
 * yet: a per-service setting would replace this default in `unitConfinement`.
 */
export const UNIT_PIDS_LIMIT = 1024;

/** What confines every unit (and job), whatever its assignment says (PID namespace: its own, Docker's default). */
export const unitConfinement = (): HostConfig => ({
  Privileged: false,
  SecurityOpt: ['no-new-privileges'],
  CapDrop: ['ALL'],
  CapAdd: [...unitCapabilities],
  IpcMode: 'private',
  PidsLimit: UNIT_PIDS_LIMIT,
});

const MIB = 1024 * 1024;

/**
 * The unit's declared memory and CPUs as Docker limits. MemorySwap equal to Memory gives no swap
 * beyond the limit, so a unit that outgrows it is killed for memory (and reported so) rather than
 * slowing the machine down by swapping.
 */
export function unitLimits(assignment: Pick<Assignment, 'resources'>, defaultMemoryMB?: number): HostConfig {
  const { memoryMB = defaultMemoryMB, cpus } = assignment.resources ?? {};
  return {
    ...(memoryMB ? { Memory: memoryMB * MIB, MemorySwap: memoryMB * MIB } : {}),
    ...(cpus ? { NanoCpus: Math.round(cpus * 1e9) } : {}),
  };
}

export function containerCreateOptions(spec: UnitContainerSpec): ContainerCreateOptions & { name: string } {
  const { assignment, port } = spec;
  const portKey = `${port}/tcp`;
  return {
    name: assignment.unit,
    Image: assignment.image,
    Env: unitEnvironment(assignment, port),
    ...(spec.user ? { User: spec.user } : {}),
    Labels: {
      [labels.managed]: 'true',
      [labels.machine]: spec.machineId,
      [labels.service]: assignment.service,
      [labels.unit]: assignment.unit,
      [labels.instance]: String(assignment.instance),
      [labels.release]: String(assignment.release),
      [labels.spec]: assignment.spec,
      [labels.stopGrace]: String(assignment.stopGraceSeconds),
      [labels.deployment]: assignment.deployment,
      [labels.port]: String(port),
      [labels.image]: assignment.image,
    },
    ...(spec.network === 'bridge' ? { ExposedPorts: { [portKey]: {} } } : {}),
    HostConfig: {
      ...unitConfinement(),
      ...(spec.logs ? { LogConfig: unitLogConfig(spec.logs) } : {}),
      ...unitLimits(assignment, spec.defaultMemoryMB),
      ...(spec.mounts?.length ? { Mounts: spec.mounts } : {}),
      ...(spec.network === 'host'
        ? { NetworkMode: 'host' }
        : { NetworkMode: 'bridge', PortBindings: { [portKey]: [{ HostIp: '', HostPort: spec.hostPort ? String(spec.hostPort) : '' }] } }),
    },
  };
}
