import type { Assignment } from '../../schemas/cluster.js';
import { slotOf } from '../../units.js';
import type { NetworkMode } from './container-spec.js';
import type { UnitContainer } from './containers.js';

// Which of this machine's containers an agent adopts, and how it replaces the ones it cannot.
// A container is adopted when it serves an assigned slot (unit and spec hash: what the release
// says the container runs) on the agent's network mode. Nothing else is compared: a container made
// with other unit defaults (memory limit, host-network user, log rotation) or by another platform
// version (other labels, the old volume names) runs the same release and stays, untouched.
//
// A container of an assigned slot on the other network mode (the agent was restarted with another
// --network) serves until its replacement is ready, one unit of a service at a time (surge 1): the
// replacement starts beside it, and once it passes its readiness probe the slot's status names
// the replacement (gateways move to it), then the old one is drained and stopped. A unit with
// volumes or a fixed host port cannot run twice (the data directory, the port), so its old
// container is drained and stopped first and the replacement starts after it, as the scheduler's
// rollouts do for such units. Pure: the agent does what the plan says.

/** What the agent does with one assigned slot this pass. */
export interface SlotPlan {
  assignment: Assignment;
  /** The slot's container on the agent's network mode (adopted, restarted, or created when missing). */
  container: UnitContainer | undefined;
  /** False: the slot's container is neither created nor touched this pass (its turn has not come). */
  run: boolean;
  /** A container on the other network mode that serves the slot meanwhile: it is observed and reported. */
  standIn?: UnitContainer;
}

/** A container that goes; `handedOver`: the slot's status names its replacement already, and stays. */
export interface Retirement {
  container: UnitContainer;
  handedOver: boolean;
}

export interface ReplacementPlan {
  slots: SlotPlan[];
  retire: Retirement[];
}

export interface PlanInput {
  assignments: Assignment[];
  containers: UnitContainer[];
  network: NetworkMode;
  /** Whether the agent has seen the container pass its readiness probe. */
  isReady: (container: UnitContainer) => boolean;
  /** Whether the container is being drained and stopped already. */
  isStopping: (container: UnitContainer) => boolean;
}

/** Units that cannot run twice on one machine: their old container goes before the new one starts. */
export const replacedInPlace = (assignment: Assignment): boolean =>
  Boolean(assignment.volumes?.length) || assignment.ports.some((mapping) => mapping.host !== undefined);

interface SlotContainers {
  assignment: Assignment;
  current?: UnitContainer;
  outgoing?: UnitContainer;
}

export function planReplacements({ assignments, containers, network, isReady, isStopping }: PlanInput): ReplacementPlan {
  const bySlot = new Map<string, SlotContainers>(assignments.map((assignment) => [slotOf(assignment), { assignment }]));
  const retire: Retirement[] = [];
  for (const container of containers) {
    const slot = bySlot.get(slotOf(container));
    if (!slot) retire.push({ container, handedOver: false });
    else if (container.network === network) slot.current = container;
    // One that does not run serves nothing: it goes, and the slot runs as if it were not there.
    else if (container.state !== 'running' && !isStopping(container)) retire.push({ container, handedOver: true });
    else slot.outgoing = container;
  }
  const slots = [...bySlot.values()].sort((a, b) => a.assignment.instance - b.assignment.instance);
  // A service is replacing a unit while an old container of it is going or its replacement starting.
  const replacing = new Set(
    slots.filter(({ current, outgoing }) => outgoing && (isStopping(outgoing) || current)).map(({ assignment }) => assignment.service),
  );
  const plans = slots.map(({ assignment, current, outgoing }): SlotPlan => {
    if (!outgoing) return { assignment, container: current, run: true };
    const inPlace = replacedInPlace(assignment);
    if (isStopping(outgoing)) return { assignment, container: current, run: !inPlace };
    const waiting = { assignment, container: current, run: false, standIn: outgoing };
    if (inPlace) {
      // Drained with its own status (it must have been reported serving first), then the slot is free.
      if (replacing.has(assignment.service) || !isReady(outgoing)) return waiting;
      replacing.add(assignment.service);
      retire.push({ container: outgoing, handedOver: false });
      return { assignment, container: current, run: false };
    }
    if (current && isReady(current)) {
      retire.push({ container: outgoing, handedOver: true });
      return { assignment, container: current, run: true };
    }
    if (current) return { ...waiting, run: true };
    if (replacing.has(assignment.service)) return waiting;
    replacing.add(assignment.service);
    return { ...waiting, run: true };
  });
  return { slots: plans, retire };
}
