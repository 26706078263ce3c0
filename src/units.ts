import { createHash } from 'node:crypto';
import type { PortMapping, Resources, Volume } from './schemas/service.js';

/** `<service>-<instance>.service`, the unit's name and its container's name. */
export const unitName = (service: string, instance: number): string => `${service}-${instance}.service`;

const UNIT_NAME = /^(.*)-([1-9][0-9]*)\.service$/;

/** The instance a unit name of `service` names; undefined when it names another service's unit. */
export function instanceOf(service: string, unit: string): number | undefined {
  const match = UNIT_NAME.exec(unit);
  return match?.[1] === service ? Number(match[2]) : undefined;
}

/** The service a unit name names; undefined for a name of another shape. */
export const serviceOfUnit = (unit: string): string | undefined => UNIT_NAME.exec(unit)?.[1];

/** Green in the dashboard: the unit runs (defined beside the state words, which the dashboard loads too). */
export { isRunning } from './schemas/states.js';

/** What decides a unit's container: two releases with the same spec run the same container. */
export interface ContainerSpecInput {
  image: string;
  env: Record<string, string>;
  ports: PortMapping[];
  resources?: Resources | undefined;
  volumes?: Volume[] | undefined;
}

/**
 * A short hash of the container spec (like Kubernetes' pod-template-hash). A release that only
 * changes numInstances keeps the spec, so its units keep running; a release that changes the
 * image, env, ports, resources or volumes gets a new spec, and its container can run beside the old one.
 */
export function specHash(input: ContainerSpecInput): string {
  const env = Object.keys(input.env)
    .sort()
    .map((name) => [name, input.env[name]]);
  // Limits and volumes join the hash only when declared, so units of services without them keep
  // the spec (and their containers) they had before these fields existed.
  const shape = input.resources || input.volumes?.length ? [{ memoryMB: input.resources?.memoryMB ?? null, cpus: input.resources?.cpus ?? null, volumes: input.volumes ?? [] }] : [];
  return createHash('sha256').update(JSON.stringify([input.image, env, input.ports, ...shape])).digest('hex').slice(0, 10);
}

/** A unit slot: one container of one unit for one spec (`web-1.service@3f2a9c01de`). */
export const slotOf = (unit: { unit: string; spec: string }): string => `${unit.unit}@${unit.spec}`;
