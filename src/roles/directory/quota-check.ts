import { HttpError } from '../../http/errors.js';
import { compileServiceGlob } from '../../service-glob.js';
import type { Quota } from '../../schemas/quota.js';
import type { Service, ServiceConfig } from '../../schemas/service.js';

// What the services a quota's glob matches reserve together, against the quota (audit L5: one
// scoped token reserved a whole machine's memory and another team's deploy failed). A change is
// refused only when it reserves more of a bounded kind and the total would pass the limit, so a
// quota set below what already runs stops growth without blocking env changes or scaling down.

type Kind = 'units' | 'memoryMB' | 'cpus';
type Reservation = Record<Kind, number>;

const kinds: readonly Kind[] = ['units', 'memoryMB', 'cpus'];
const unitsOf: Record<Kind, string> = { units: 'units', memoryMB: 'MB of memory', cpus: 'CPUs' };
const EPSILON = 1e-9;

const reservationOf = (config: ServiceConfig): Reservation => ({
  units: config.numInstances,
  memoryMB: config.numInstances * (config.resources?.memoryMB ?? 0),
  cpus: config.numInstances * (config.resources?.cpus ?? 0),
});

const rounded = (value: number): number => Math.round(value * 100) / 100;

/** 403 naming the quota when `next` would make the services its glob matches reserve more than it allows. */
export function assertWithinQuotas(quotas: readonly Quota[], declared: readonly Service[], next: Service): void {
  const previous = declared.find((service) => service.name === next.name);
  const before = previous ? reservationOf(previous.config) : undefined;
  const after = reservationOf(next.config);
  for (const quota of quotas) {
    const matches = compileServiceGlob(quota.services);
    if (!matches(next.name)) continue;
    const others = declared.filter((service) => service.name !== next.name && matches(service.name)).map((service) => reservationOf(service.config));
    for (const kind of kinds) {
      const limit = quota[kind];
      if (limit === undefined) continue;
      assertDeclared(quota, kind, next, previous);
      if (before && after[kind] <= before[kind] + EPSILON) continue;
      const used = others.reduce((sum, reservation) => sum + reservation[kind], 0);
      if (used + after[kind] > limit + EPSILON) {
        throw new HttpError(
          403,
          `quota ${quota.services} allows ${limit} ${unitsOf[kind]} for its services together: ${next.name} would reserve ${rounded(after[kind])}, ` +
            `the others use ${rounded(used)}, so ${rounded(Math.max(0, limit - used))} is left (an admin changes it with platform quota set)`,
        );
      }
    }
  }
}

/**
 * Under a quota of memory or CPUs, a unit that declares none would reserve nothing and be bounded by
 * nothing: a new service, more units or a dropped limit must declare it (or the directory's
 * --default-unit-memory gives the memory).
 */
function assertDeclared(quota: Quota, kind: Kind, next: Service, previous: Service | undefined): void {
  if (kind === 'units' || next.config.resources?.[kind] !== undefined) return;
  const grows = !previous || next.config.numInstances > previous.config.numInstances || previous.config.resources?.[kind] !== undefined;
  if (grows) {
    throw new HttpError(403, `quota ${quota.services} bounds ${unitsOf[kind]}: ${next.name} must declare resources.${kind} for its units`);
  }
}
