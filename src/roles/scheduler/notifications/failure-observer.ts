import type { WatchEvent } from '../../../store/store.js';
import { lastSegment } from '../../../store/keys.js';
import { unitStatusKeyOf } from '../../../store/records/unit-statuses.js';
import type { UnitStatus } from '../../../schemas/cluster.js';
import type { NotificationEvent } from '../../../schemas/notification.js';
import { isRunning } from '../../../units.js';
import { failureEpisode, machineLostEvent, unitFailedEvent } from '../../../notifications/events.js';
import type { ClusterWatch } from '../cluster-snapshot.js';

// Notices, in the watched cluster, the two events no scheduler writes itself: a unit turning
// failed (its agent's status) and a machine going (its lease ended). Every scheduler runs one, not
// only the leader: the machine that goes may be the leader's own, and a follower watched it go.
// Each watch delivers the same writes in the same order to every scheduler, so each derives the
// same event id from the write's revision, and the outbox keeps one.
//
// A unit's failure is told once until it runs again: a unit that keeps crashing before it ever
// runs is one event, not one per restart. What is failed when a scheduler starts is told too (it
// may have failed while no scheduler watched, as when the only one restarts): the agent names the
// failure episode (`failingSince`), the event id comes from it, and the outbox and deliveries keep
// one per id, so an episode told before is not told again. A status without it (an older agent)
// cannot be told apart from one told before, and is not told.

export class FailureObserver {
  /** Status keys of slots whose failure was seen and that have not run since. */
  private readonly failing = new Set<string>();

  constructor(
    private readonly cluster: Pick<ClusterWatch, 'statuses' | 'onChange' | 'snapshot'>,
    private readonly record: (event: NotificationEvent) => void,
  ) {
    for (const status of cluster.statuses()) {
      if (status.active !== 'failed') continue;
      this.failing.add(unitStatusKeyOf(status));
      if (status.failingSince !== undefined) this.record(unitFailedEvent(status, status.failingSince));
    }
    cluster.onChange('statuses', (event) => this.statusChanged(event));
    cluster.onChange('machines', (event) => event.type === 'delete' && this.machineGone(event));
  }

  private statusChanged(event: WatchEvent): void {
    if (event.type === 'delete' || event.value === undefined) {
      this.failing.delete(event.key);
      return;
    }
    // A listener runs inside the store's watch callback: what it throws would end the process.
    let status: UnitStatus;
    try {
      status = JSON.parse(event.value) as UnitStatus;
    } catch {
      return;
    }
    if (isRunning(status)) this.failing.delete(event.key);
    else if (status.active === 'failed' && !this.failing.has(event.key)) {
      this.failing.add(event.key);
      this.record(unitFailedEvent(status, failureEpisode(status, event.modRevision)));
    }
  }

  private machineGone(event: WatchEvent): void {
    const machine = lastSegment(event.key);
    this.record(machineLostEvent(machine, event.modRevision, this.servicesOn(machine), new Date().toISOString()));
  }

  /**
   * The services with units assigned to the machine: its assignments are still there, healing
   * moves them after this. None when the store is unreachable (a lease that expires then is often
   * why), since the watched copy refuses reads of unknown age and the event must not wait.
   */
  private servicesOn(machine: string): string[] {
    try {
      return this.cluster.snapshot().assignments.filter((assignment) => assignment.machine === machine).map((assignment) => assignment.service);
    } catch {
      return [];
    }
  }
}
