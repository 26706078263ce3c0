import { trace } from '../../trace.js';
import type Docker from 'dockerode';
import type { UnitFailure } from './status-reporter.js';
import { labels, machineLabelFilters, type NetworkMode } from './container-spec.js';
import { isVolumeNameOfService } from './unit-volumes.js';
import { parseImageReference } from '../../image-reference.js';
import type { CredentialLookup } from '../../auth/registry-credentials.js';
import { HttpError } from '../../http/errors.js';
import { dockerErrorMessage } from './docker-client.js';

// Docker operations on unit containers. Every query filters on this machine's label, so agents
// sharing one engine (tests, or a machine migrated between ids) never touch each other's units.

export interface UnitContainer {
  id: string;
  /** The container's name (without Docker's leading slash). */
  name: string;
  unit: string;
  /** The spec hash it was created for: with `unit`, the slot it serves. */
  spec: string;
  release: number;
  /** Seconds it gets between SIGTERM and SIGKILL. */
  stopGraceSeconds?: number;
  image: string;
  /** The unit's `PORT`, from its label: stable across agent restarts. */
  port: number;
  /** The network mode it was created with (Docker's own record, so containers of any platform version have one). */
  network: NetworkMode;
  /** Docker's state: created, running, exited, dead, paused, restarting, removing. */
  state: string;
  /** Bridge mode: the host port Docker published the unit's port on. */
  publishedPort?: number;
}

/** The host port the unit is reached at: its own port on host networking, the published one on bridge. */
export const hostPortOf = (container: UnitContainer): number | undefined => (container.network === 'host' ? container.port : container.publishedPort);

export interface ContainerExit {
  /** None when the engine refused to create the container. */
  exitCode?: number;
  /** How long the container ran before it stopped (0 when it never started). */
  ranForMs: number;
  /** Why it stopped, for the unit's status: Docker could not start it, or it ran and exited. */
  failure: UnitFailure;
  /** The engine's own words when it refused to create or start the container: then the program wrote nothing. */
  engineError?: string;
}

/**
 * The engine created the container but refused to start it (an unknown command, a port taken): the
 * container stays, with its state's error, so its failure and that error can be kept and shown.
 */
export class StartRefused extends Error {
  constructor(
    readonly containerId: string,
    readonly engineError: string,
  ) {
    super(engineError);
  }
}

/** What people read when the kernel killed a unit for memory: its limit, which is what to raise. */
export const outOfMemory = (limitBytes: number | undefined): string =>
  limitBytes ? `out of memory (limit ${Math.round(limitBytes / (1024 * 1024))} MB)` : 'out of memory (no limit: the machine ran out)';

const statusCodeOf = (error: unknown): number | undefined => (error as { statusCode?: number }).statusCode;

function toUnitContainer(entry: Docker.ContainerInfo): UnitContainer {
  const entryLabels = entry.Labels ?? {};
  const port = Number(entryLabels[labels.port]);
  const published = entry.Ports?.find((mapping) => mapping.PrivatePort === port && mapping.PublicPort);
  const name = entry.Names[0]?.replace(/^\//, '') ?? entry.Id;
  const grace = entryLabels[labels.stopGrace];
  return {
    id: entry.Id,
    name,
    unit: entryLabels[labels.unit] ?? name,
    spec: entryLabels[labels.spec] ?? '',
    release: Number(entryLabels[labels.release]),
    ...(grace === undefined ? {} : { stopGraceSeconds: Number(grace) }),
    image: entryLabels[labels.image] ?? entry.Image,
    port,
    // Units are created with `host` or `bridge`; Docker says `default` for bridge on some engines.
    network: entry.HostConfig?.NetworkMode === 'host' ? 'host' : 'bridge',
    state: entry.State,
    ...(published ? { publishedPort: published.PublicPort } : {}),
  };
}

/** How long volume removal waits for the service's containers (being drained and stopped) to go. */
const VOLUME_REMOVAL_WAIT_MS = 45_000;

/**
 * Removes the volumes this machine's units of `service` had (by their labels and their names), after waiting for
 * the service's containers here to be gone: a volume still mounted cannot be removed.
 */
export async function removeServiceVolumes(docker: Docker, machineId: string, service: string): Promise<string[]> {
  const filters = { label: [...machineLabelFilters(machineId), `${labels.service}=${service}`] };
  const deadline = Date.now() + VOLUME_REMOVAL_WAIT_MS;
  while ((await docker.listContainers({ all: true, filters })).length > 0) {
    if (Date.now() > deadline) throw new HttpError(409, `${service} still has containers on machine ${machineId}; its volumes stay`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  const { Volumes: volumes } = await docker.listVolumes({ filters });
  const names = (volumes ?? []).map((volume) => volume.Name).filter((name) => isVolumeNameOfService(service, name));
  for (const name of names) await docker.getVolume(name).remove();
  return names;
}

export async function listUnitContainers(docker: Docker, machineId: string): Promise<UnitContainer[]> {
  const entries = await docker.listContainers({ all: true, filters: { label: machineLabelFilters(machineId) } });
  return entries.map(toUnitContainer);
}

export async function findUnitContainer(docker: Docker, machineId: string, unit: string): Promise<UnitContainer | undefined> {
  const entries = await docker.listContainers({
    all: true,
    filters: { label: [...machineLabelFilters(machineId), `${labels.unit}=${unit}`] },
  });
  return entries[0] ? toUnitContainer(entries[0]) : undefined;
}

interface ProgressEvent {
  error?: string;
  errorDetail?: { message?: string };
}

/**
 * Pulls `image` unless the engine has it already, with its registry's login when an admin stored
 * one. Images are pinned by digest, so a local copy is never stale.
 */
export async function ensureImage(docker: Docker, image: string, credentials?: CredentialLookup): Promise<void> {
  try {
    await docker.getImage(image).inspect();
    return;
  } catch (error) {
    if (statusCodeOf(error) !== 404) throw error;
  }
  const registry = parseImageReference(image).registry;
  const credential = await credentials?.(registry);
  const stream = await docker.pull(image, credential ? { authconfig: { ...credential, serveraddress: registry } } : {});
  await new Promise<void>((resolve, reject) => {
    docker.modem.followProgress(stream, (error: Error | null, events: ProgressEvent[]) => {
      const failed = events?.find((event) => event.error);
      if (error) reject(error);
      else if (failed) reject(new Error(failed.errorDetail?.message ?? failed.error));
      else resolve();
    });
  });
}

/**
 * Creates and starts a unit container under `name`, or under `fallbackName` when another
 * container holds the name: the old slot of the same unit during a rolling update, or another
 * machine's unit on an engine shared by several machines (tests), which this agent must not
 * touch. Units are found by label; `canonicalName` gives the unit its name back later. With
 * `nameTaken` (the caller saw a container holding `name`) it goes straight to `fallbackName`.
 */
export async function createAndStart(
  docker: Docker,
  options: Docker.ContainerCreateOptions & { name: string },
  fallbackName: string,
  nameTaken = false,
): Promise<string> {
  let container: Docker.Container;
  trace('agent.create', options.name);
  try {
    container = await docker.createContainer(nameTaken ? { ...options, name: fallbackName } : options);
  } catch (error) {
    if (nameTaken || statusCodeOf(error) !== 409) throw error;
    container = await docker.createContainer({ ...options, name: fallbackName });
  }
  trace('agent.created', options.name);
  try {
    await container.start();
  } catch (error) {
    throw new StartRefused(container.id, dockerErrorMessage(error));
  }
  trace('agent.started', options.name);
  return container.id;
}

/** Renames a container to its unit's name once nothing else holds it; a clash is left for later. */
export async function canonicalName(docker: Docker, container: UnitContainer): Promise<void> {
  try {
    await docker.getContainer(container.id).rename({ name: container.unit });
  } catch (error) {
    const status = statusCodeOf(error);
    if (status !== 409 && status !== 404) throw error;
  }
}

export async function startContainer(docker: Docker, id: string): Promise<void> {
  try {
    await docker.getContainer(id).start();
  } catch (error) {
    if (statusCodeOf(error) !== 304) throw error;
  }
}

/** SIGTERM, `graceSeconds` to exit, then SIGKILL (Docker's stop), and remove. Gone already is fine. */
export async function stopAndRemove(docker: Docker, id: string, graceSeconds: number): Promise<void> {
  const container = docker.getContainer(id);
  try {
    await container.stop({ t: graceSeconds });
  } catch (error) {
    const status = statusCodeOf(error);
    if (status !== 304 && status !== 404) throw error;
  }
  try {
    await container.remove({ force: true });
  } catch (error) {
    const status = statusCodeOf(error);
    if (status !== 404 && status !== 409) throw error;
  }
}

/** The container's first process, while it runs (not restarting, not paused): what listens for it is asked of /proc. */
export async function runningPid(docker: Docker, id: string): Promise<number | undefined> {
  const { State: state } = await docker.getContainer(id).inspect();
  return state.Running && !state.Restarting && !state.Paused && state.Pid > 0 ? state.Pid : undefined;
}

export async function inspectExit(docker: Docker, id: string): Promise<ContainerExit> {
  const { State: state, HostConfig: hostConfig } = await docker.getContainer(id).inspect();
  const started = Date.parse(state.StartedAt);
  const finished = Date.parse(state.FinishedAt);
  const ranForMs = started > 0 && finished > started ? finished - started : 0;
  const exit = { exitCode: state.ExitCode, ranForMs };
  // Docker records an Error when it could not start the container at all: it never ran to crash.
  if (state.Error) return { ...exit, failure: { error: `failed to start: ${state.Error}`, errorKind: 'container-start' }, engineError: state.Error };
  if (state.OOMKilled) return { ...exit, failure: { error: outOfMemory(hostConfig.Memory), errorKind: 'out-of-memory' } };
  return { ...exit, failure: { error: `exited with code ${state.ExitCode}`, errorKind: 'crash-loop' } };
}
