import type Docker from 'dockerode';
import type { MountSettings } from 'dockerode';
import type { Assignment } from '../../schemas/cluster.js';
import { labels } from './container-spec.js';

// Which Docker volume a unit's declared volume is. The name must belong to exactly one (service,
// instance, volume) triple: the old `<service>-<instance>-<name>` did not (service `app` with
// volume `1-data` and service `app-1` with volume `data` were both `app-1-1-data`), so one service
// mounted another's data. A "." separates the parts now: service names are DNS labels and volume
// names `[a-z0-9_-]`, neither can hold one, and Docker's volume names accept it. The name alone is
// not trusted either: a volume that exists already is mounted only when its labels name this
// service and instance, so one made (or relabelled) for anyone else is refused, never shared.

type UnitOfService = Pick<Assignment, 'service' | 'instance'>;
/** A unit's volumes, or a job's (which mounts its service's instance 1's). */
type VolumesOfUnit = Pick<Assignment, 'service' | 'instance' | 'volumes'>;

/** `<service>.<instance>.<name>`: the unit's volume, kept across its containers (and releases). */
export const unitVolumeName = (unit: UnitOfService, name: string): string => `${unit.service}.${unit.instance}.${name}`;

/** The name volumes had before `unitVolumeName`; adopted only when its labels say it is this unit's. */
const legacyUnitVolumeName = (unit: UnitOfService, name: string): string => `${unit.service}-${unit.instance}-${name}`;

/** Whether `volumeName` is one the agent names for some unit of `service` (either scheme). */
export const isVolumeNameOfService = (service: string, volumeName: string): boolean =>
  volumeName.startsWith(`${service}.`) || new RegExp(`^${service}-[0-9]+-[a-z0-9]`).test(volumeName);

/** The labels a unit's volume is created with, and which one that exists must carry to be mounted. */
export const unitVolumeLabels = (unit: UnitOfService, machineId: string, name: string): Record<string, string> => ({
  [labels.managed]: 'true',
  [labels.machine]: machineId,
  [labels.service]: unit.service,
  [labels.instance]: String(unit.instance),
  [labels.volume]: name,
});

/** The agent will not run the unit as assigned; the message says why, for its status. */
export class UnitRefusal extends Error {}

const belongsTo = (volumeLabels: Record<string, string> | null | undefined, unit: UnitOfService): boolean =>
  volumeLabels?.[labels.service] === unit.service && volumeLabels?.[labels.instance] === String(unit.instance);

async function labelsOf(docker: Docker, name: string): Promise<Record<string, string> | null | undefined> {
  try {
    const inspected = (await docker.getVolume(name).inspect()) as { Labels?: Record<string, string> | null };
    return inspected.Labels ?? null;
  } catch (error) {
    if ((error as { statusCode?: number }).statusCode === 404) return undefined;
    throw error;
  }
}

/**
 * The Docker volume each declared volume of the unit mounts, by declared name. A volume under the
 * unit's name that is labelled for another service or instance (or not labelled at all) is
 * refused with UnitRefusal; one under the old name is adopted only when labelled for this unit.
 */
async function unitVolumeSources(docker: Docker, assignment: VolumesOfUnit): Promise<Map<string, string>> {
  const sources = new Map<string, string>();
  for (const { name } of assignment.volumes ?? []) {
    const current = unitVolumeName(assignment, name);
    const found = await labelsOf(docker, current);
    if (found !== undefined && !belongsTo(found, assignment)) {
      const owner = found?.[labels.service] ? `${found[labels.service]}-${found[labels.instance] ?? '?'}` : 'no platform unit';
      throw new UnitRefusal(`volume ${current} exists and is labelled for ${owner}, not ${assignment.service}-${assignment.instance}; it is not mounted`);
    }
    const legacy = legacyUnitVolumeName(assignment, name);
    sources.set(name, found === undefined && belongsTo(await labelsOf(docker, legacy), assignment) ? legacy : current);
  }
  return sources;
}

/** The unit's named volumes as mounts; Docker creates a missing one at the first mount, with the unit's labels. */
export async function unitMounts(docker: Docker, assignment: VolumesOfUnit, machineId: string): Promise<MountSettings[]> {
  const sources = await unitVolumeSources(docker, assignment);
  return (assignment.volumes ?? []).map((volume) => ({
    Type: 'volume',
    Source: sources.get(volume.name)!,
    Target: volume.path,
    // NoCopy false: a new volume starts with what the image has at the path, as `docker run -v` does.
    VolumeOptions: { NoCopy: false, DriverConfig: { Name: 'local', Options: {} }, Labels: unitVolumeLabels(assignment, machineId, volume.name) },
  }));
}
