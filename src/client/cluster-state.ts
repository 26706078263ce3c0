import type { Change, Snapshot } from '../schemas/events.js';
import type { Deployment, JournalEntry } from '../schemas/release.js';
import type { ClusterUnit as Unit, Machine } from '../schemas/cluster.js';
import type { Service } from '../schemas/service.js';

// The dashboard's and the CLI's copy of the cluster, fed by the event stream (GET /events): a
// snapshot, then one record at a time. It imports types alone, so the page loads it as it is.
// Indexes by service and machine are kept as records change, so a burst of unit events costs a
// few map operations each; views re-render only what `changes` names, once per frame.

export interface Changes {
  /** A snapshot replaced everything. */
  everything: boolean;
  /** Services whose record, units or deployments changed. */
  services: Set<string>;
  /** Machines whose record or units changed. */
  machines: Set<string>;
  deployments: boolean;
  journal: boolean;
}

const noChanges = (): Changes => ({ everything: false, services: new Set(), machines: new Set(), deployments: false, journal: false });

const JOURNAL_LIMIT = 500;
const DEPLOYMENT_LIMIT = 500;

export class ClusterState {
  readonly services = new Map<string, Service>();
  readonly units = new Map<string, Unit>();
  readonly machines = new Map<string, Machine>();
  readonly deployments = new Map<string, Deployment>();
  readonly journal = new Map<string, JournalEntry>();
  /** Whether a snapshot has arrived since the page loaded. */
  loaded = false;
  private readonly byService = new Map<string, Map<string, Unit>>();
  private readonly byMachine = new Map<string, Map<string, Unit>>();
  private readonly latest = new Map<string, Deployment>();
  private changes = noChanges();

  load(snapshot: Snapshot): void {
    for (const map of [this.services, this.units, this.machines, this.deployments, this.journal, this.byService, this.byMachine, this.latest]) map.clear();
    for (const [name, service] of Object.entries(snapshot.services)) this.services.set(name, service);
    for (const [key, unit] of Object.entries(snapshot.units)) this.putUnit(key, unit);
    for (const [id, machine] of Object.entries(snapshot.machines)) this.machines.set(id, machine);
    for (const deployment of Object.values(snapshot.deployments)) this.putDeployment(deployment);
    for (const [id, entry] of Object.entries(snapshot.journal)) this.journal.set(id, entry);
    this.loaded = true;
    this.changes = { ...noChanges(), everything: true };
  }

  /** What changed since the last call. */
  takeChanges(): Changes {
    const changes = this.changes;
    this.changes = noChanges();
    return changes;
  }

  applyService(change: Change<Service>): void {
    if (change.deleted) this.services.delete(change.key);
    else this.services.set(change.key, change.value);
    this.changes.services.add(change.key);
  }

  applyUnit(change: Change<Unit>): void {
    const old = this.units.get(change.key);
    if (old) this.removeUnit(change.key, old);
    if (!change.deleted) this.putUnit(change.key, change.value);
  }

  applyMachine(change: Change<Machine>): void {
    if (change.deleted) this.machines.delete(change.key);
    else this.machines.set(change.key, change.value);
    this.changes.machines.add(change.key);
  }

  applyDeployment(change: Change<Deployment>): void {
    const old = this.deployments.get(change.key);
    if (change.deleted) {
      this.deployments.delete(change.key);
      if (old && this.latest.get(old.service)?.id === old.id) this.recomputeLatest(old.service);
    } else {
      this.putDeployment(change.value);
      if (this.deployments.size > DEPLOYMENT_LIMIT) this.dropOldestDeployment();
    }
    this.changes.deployments = true;
  }

  applyJournal(change: Change<JournalEntry>): void {
    if (change.deleted) this.journal.delete(change.key);
    else this.journal.set(change.key, change.value);
    if (this.journal.size > JOURNAL_LIMIT) {
      const oldest = [...this.journal.keys()].sort()[0];
      if (oldest !== undefined) this.journal.delete(oldest);
    }
    this.changes.journal = true;
  }

  /** The service's units (slots), by instance; running ones before the ones being replaced. */
  unitsOf(service: string): Unit[] {
    return [...(this.byService.get(service)?.values() ?? [])].sort(byInstance);
  }

  unitsOn(machine: string): Unit[] {
    return [...(this.byMachine.get(machine)?.values() ?? [])].sort((a, b) => a.service.localeCompare(b.service) || byInstance(a, b));
  }

  /** Machines that have units: registered ones and lost ones (units assigned, no registration). */
  machinesWithUnits(): string[] {
    return [...this.byMachine.keys()];
  }

  latestDeployment(service: string): Deployment | undefined {
    return this.latest.get(service);
  }

  /** Whether the service was deployed and not stopped since (a stop is recorded as a deployment). */
  isDeployed(service: string): boolean {
    const latest = this.latest.get(service);
    return latest !== undefined && latest.trigger !== 'stop';
  }

  /**
   * Units the service's newest deployment wants (its release's numInstances): 0 before its first
   * deploy and once stopped; undefined when that record was written before deployments said.
   */
  wantedUnits(service: string): number | undefined {
    return this.isDeployed(service) ? this.latest.get(service)?.wanted : 0;
  }

  private putUnit(key: string, unit: Unit): void {
    this.units.set(key, unit);
    index(this.byService, unit.service, key, unit);
    index(this.byMachine, unit.machine, key, unit);
    this.changes.services.add(unit.service);
    this.changes.machines.add(unit.machine);
  }

  private removeUnit(key: string, unit: Unit): void {
    this.units.delete(key);
    unindex(this.byService, unit.service, key);
    unindex(this.byMachine, unit.machine, key);
    this.changes.services.add(unit.service);
    this.changes.machines.add(unit.machine);
  }

  private putDeployment(deployment: Deployment): void {
    this.deployments.set(deployment.id, deployment);
    const latest = this.latest.get(deployment.service);
    if (!latest || latest.id <= deployment.id) this.latest.set(deployment.service, deployment);
    this.changes.services.add(deployment.service);
  }

  private recomputeLatest(service: string): void {
    this.latest.delete(service);
    for (const deployment of this.deployments.values()) {
      if (deployment.service === service) this.putDeployment(deployment);
    }
  }

  private dropOldestDeployment(): void {
    const oldest = [...this.deployments.values()].filter((d) => this.latest.get(d.service) !== d).sort((a, b) => (a.id < b.id ? -1 : 1))[0];
    if (oldest) this.deployments.delete(oldest.id);
  }
}

function index(map: Map<string, Map<string, Unit>>, group: string, key: string, unit: Unit): void {
  let units = map.get(group);
  if (!units) map.set(group, (units = new Map()));
  units.set(key, unit);
}

function unindex(map: Map<string, Map<string, Unit>>, group: string, key: string): void {
  const units = map.get(group);
  units?.delete(key);
  if (units?.size === 0) map.delete(group);
}

const byInstance = (a: Unit, b: Unit): number => a.instance - b.instance || Number(b.desired) - Number(a.desired) || a.release - b.release;
