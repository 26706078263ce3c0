import type { FastifyBaseLogger } from 'fastify';
import type { Compare, Operation, Store } from '../../../store/store.js';
import { assignmentDelete, assignmentKeyOf as keyOf, assignmentPut } from '../../../store/records/assignments.js';
import { notDrained } from '../../../store/records/machine-drains.js';
import type { Assignment } from '../../../schemas/cluster.js';
import { checkPlan } from '../../../placement/plan-check.js';
import type { ServiceRules } from '../../../placement/planner.js';
import { jobCreate } from '../../../store/records/jobs.js';
import type { Job } from '../../../schemas/job.js';
import { KeyedQueue } from '../../../keyed-queue.js';
import { trace } from '../../../trace.js';
import { placeJobIn, placedUnit, plannerMachine, serviceRules, type ClusterWatch } from '../cluster-snapshot.js';

// The leader's one writer of unit placements, after Nomad's plan applier. Every rollout step
// (a deploy, a reschedule that heals a lost machine, a drain) is a plan made from a snapshot. The
// applier takes plans one at a time: it checks each against the newest state (every service's
// assignments, the machines, the drains; plan-check.ts), commits it in one transaction, and waits
// until its own watch shows the commit, so the next plan is checked with these units counted. A
// plan that no longer fits is refused, and its rollout plans again from the newer state. A step
// that places units is made in its turn (applyPlanned), from the state every earlier commit is
// in: made side by side from one snapshot, each such plan fits, but all choose the same least
// used machines (twelve three-unit services on four machines went 12, 12, 12, 0).
//
// What the transaction compares: the service's declaration (a changed or deleted declaration
// means the plan is stale), and for each machine that gets a unit, that it is still not drained.
// Other units come only from this applier, and the leader's fence (FencedStore) keeps a deposed
// leader's applier from writing; deletions elsewhere (a stop, housekeeping) only free room.

export interface Plan {
  service: string;
  /** The declaration the plan was made from: the plan commits only while it still stands. */
  declaration: { key: string; modRevision: number };
  /** The service's rules as the release being rolled out has them (its host ports, memory, conflictsWith). */
  rules: ServiceRules;
  /** Assignments the plan removes. */
  retire: Assignment[];
  /** Assignments rewritten where they are (a unit of the target spec joining the release). */
  update: Assignment[];
  /** New units: the only part checked, since nothing else makes a machine fuller. */
  place: Assignment[];
}

/** `revision`: the commit's, or 0 when nothing was left to write (what the plan would change was already gone). */
export type PlanResult = { applied: true; revision: number } | { applied: false; reason: string };

/** All placements go through one queue: plans of different services are checked and committed one at a time. */
const PLACEMENTS = 'placements';

export class PlanApplier {
  private readonly queue = new KeyedQueue();

  constructor(
    /** The leader-fenced store. */
    private readonly store: Store,
    private readonly cluster: ClusterWatch,
    private readonly log: FastifyBaseLogger,
  ) {}

  /** Checks the plan against the newest state and commits it, or says why not. */
  apply(plan: Plan): Promise<PlanResult> {
    return this.applyPlanned(() => plan);
  }

  /**
   * Makes the plan in its turn, from the newest state (`plan` reads the cluster watch, which
   * shows every plan committed before), then checks and commits it as `apply` does. Plans made
   * side by side from one snapshot each fit, but all choose the same least used machine.
   */
  applyPlanned(plan: () => Plan): Promise<PlanResult> {
    return this.queue.run(PLACEMENTS, () => this.checkAndCommit(plan()));
  }

  /**
   * Checks that the job still fits on its machine, as one more unit would (job-placement.ts), and
   * creates it there in one transaction with `alsoWrite` (its journal line), unless a job of its id
   * exists already (a release command's, placed before an election). Jobs are placed on the same
   * queue as units, so a job and a rollout step never both take a machine's last room.
   */
  applyJob(job: Job, rules: ServiceRules, alsoWrite: Operation[]): Promise<PlanResult> {
    return this.queue.run(PLACEMENTS, async () => {
      const placed = placeJobIn(this.cluster.snapshot(), rules, job.machine);
      if ('refusal' in placed) return { applied: false, reason: placed.refusal };
      const create = jobCreate(job);
      const committed = await this.store.txn([create.compare, notDrained(job.machine)], [create.operation, ...alsoWrite]);
      if (!committed.succeeded) return { applied: false, reason: `job ${job.id} exists already, or machine ${job.machine} is being drained` };
      return { applied: true, revision: committed.revision };
    });
  }

  private async checkAndCommit(stale: Plan): Promise<PlanResult> {
    const snapshot = this.cluster.snapshot();
    const plan = withoutGone(stale, new Set(snapshot.assignments.map(keyOf)));
    if (plan.retire.length + plan.update.length + plan.place.length === 0) return { applied: true, revision: 0 };
    const replaced = new Set([...plan.retire, ...plan.place].map(keyOf));
    const refusals = checkPlan({
      machines: snapshot.machines.map((machine) => plannerMachine(machine, snapshot.drained, snapshot.announcedPorts)),
      current: snapshot.assignments.filter((assignment) => !replaced.has(keyOf(assignment))).map(placedUnit),
      rules: [...snapshot.services.filter((service) => service.name !== plan.service).map(serviceRules), plan.rules],
      service: plan.service,
      place: plan.place,
    });
    if (refusals.length > 0) {
      const reason = refusals.map((refusal) => refusal.reason).join('; ');
      this.log.info({ service: plan.service, reason }, 'plan refused: the cluster changed since it was made');
      return { applied: false, reason };
    }
    const targets = new Set(plan.place.map((assignment) => assignment.machine));
    const compares: Compare[] = [
      { key: plan.declaration.key, target: 'modRevision', equals: plan.declaration.modRevision },
      ...[...targets].map(notDrained),
    ];
    const operations: Operation[] = [
      ...plan.retire.map(assignmentDelete),
      ...[...plan.update, ...plan.place].map(assignmentPut),
    ];
    const committed = await this.store.txn(compares, operations);
    trace('scheduler.assignments', `${plan.service} ${operations.length} ${committed.succeeded}`);
    if (!committed.succeeded) return { applied: false, reason: `${plan.service}'s declaration changed or a machine it placed on is being drained` };
    // The next plan is checked with these units counted.
    await this.cluster.assignmentsCaughtUp(committed.revision);
    return { applied: true, revision: committed.revision };
  }
}

/**
 * The plan less removals and rewrites of assignments already gone (another rollout of the service
 * retired them first): rewriting one would bring it back, and a transaction that changes nothing
 * makes no revision for the watch to deliver.
 */
function withoutGone(plan: Plan, present: ReadonlySet<string>): Plan {
  const exists = (assignment: Assignment) => present.has(keyOf(assignment));
  return { ...plan, retire: plan.retire.filter(exists), update: plan.update.filter(exists) };
}
