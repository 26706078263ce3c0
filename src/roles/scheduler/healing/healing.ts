import type { Assignment, Machine } from '../../../schemas/cluster.js';
import { currentTarget, type Deployment } from '../../../schemas/release.js';

// Self-healing, planned purely: which services need their current release deployed again because
// their units are no longer all in place (a machine died with some, an instance lost its
// assignment, a machine is being drained or has had no Docker engine for longer than the grace
// period). The leader applies the plan as `reschedule` deployments, whose rollouts place the
// missing units (replacements on drained machines start before the old units go). Only structure
// counts here, not health: a unit that crashes is restarted by its agent, not moved.

export interface HealingInput {
  machines: Machine[];
  assignments: Assignment[];
  /** Every deployment record, newest first. */
  deployments: Deployment[];
  drained: ReadonlySet<string>;
  /** Machines without a Docker engine for longer than the grace period: their units move like a drained machine's. */
  engineLost: ReadonlySet<string>;
  /** Services declared now: a deleted service keeps its deployment records, not its units. */
  declared: ReadonlySet<string>;
  /** Services with work queued or running: their rollout already converges on the target. */
  busy: (service: string) => boolean;
  /** numInstances of a service's release, when the release exists. */
  instancesOf: (service: string, release: number) => number | undefined;
  /** Whether the release's units keep volumes and may not move: a lost or drained machine keeps them. */
  keepsVolumes?: (service: string, release: number) => boolean;
  /**
   * Machines not registered that still have their renewal grace (this leader was elected a moment
   * ago: the store may have dropped every lease, as the embedded store does when it opens, and the
   * agents have not registered again yet). Their units count as in place.
   */
  renewing?: ReadonlySet<string>;
  /**
   * Machines not registered whose agent stopped on purpose (a restart, a reboot) less than the
   * machine grace ago: expected back, so their units count as in place.
   */
  away?: ReadonlySet<string>;
}

export interface Reschedule {
  service: string;
  release: number;
  why: string;
}

export function planHealing(input: HealingInput): Reschedule[] {
  const alive = new Set([...input.machines.map((machine) => machine.id), ...(input.renewing ?? []), ...(input.away ?? [])]);
  const services = new Set(input.deployments.map((d) => d.service).filter((service) => input.declared.has(service)));
  const plan: Reschedule[] = [];
  for (const service of services) {
    const target = currentTarget(input.deployments.filter((d) => d.service === service));
    if (!target || target.state !== 'succeeded' || input.busy(service)) continue;
    const instances = input.instancesOf(service, target.release);
    if (instances === undefined) continue;
    const assigned = input.assignments.filter((a) => a.service === service);
    // Units that stay with their volumes are in place wherever their machine is: moving them is
    // not healing's to do (the unit listing says why they do not run), nor is a dead engine's.
    const stays = input.keepsVolumes?.(service, target.release) ?? false;
    const own = assigned.filter((a) => stays || alive.has(a.machine));
    const lost = assigned.filter((a) => !stays && !alive.has(a.machine)).map((a) => `${a.unit} on ${a.machine}`);
    const drained = own.filter((a) => !stays && input.drained.has(a.machine)).map((a) => `${a.unit} off ${a.machine}`);
    const engineless = own.filter((a) => !stays && input.engineLost.has(a.machine) && !input.drained.has(a.machine)).map((a) => `${a.unit} off ${a.machine}`);
    const complete = own.length === instances && new Set(own.map((a) => a.instance)).size === instances;
    if (complete && drained.length === 0 && engineless.length === 0) continue;
    const why = lost.length
      ? `machine lost: moving ${lost.join(', ')}`
      : drained.length
        ? `machine drained: moving ${drained.join(', ')}`
        : engineless.length
          ? `machine has no Docker engine: moving ${engineless.join(', ')}`
          : 'units missing: placing them again';
    plan.push({ service, release: target.release, why });
  }
  return plan;
}
