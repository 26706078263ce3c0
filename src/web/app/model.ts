// The API's records as the dashboard reads them. The server's TypeBox schemas (src/schemas/) and
// the event stream (src/roles/orchestrator/events.ts) are the source of truth; only the fields the
// dashboard uses are named here.

export interface PortMapping {
  container: number;
  host?: number;
}

export interface ServiceConfig {
  numInstances: number;
  ports: PortMapping[];
  env: Record<string, string>;
  [setting: string]: unknown;
}

export interface Service {
  name: string;
  description: string;
  containerImage: string;
  autoDeploy: string;
  conflictsWith: string;
  loadBalanced: boolean;
  publicFacing: boolean;
  config: ServiceConfig;
  createdAt: string;
  updatedAt: string;
}

/** An assignment joined with its agent's status (GET /cluster/units). */
export interface Unit {
  unit: string;
  service: string;
  instance: number;
  machine: string;
  release: number;
  /** The container spec: while a unit is replaced, its old and new containers differ in spec. */
  spec?: string;
  image: string;
  active: string;
  sub: string;
  address?: string;
  restarts: number;
  error?: string;
  /** False while the unit runs but is no longer assigned: it is being stopped. */
  desired: boolean;
}

export interface Machine {
  id: string;
  address: string;
  host: string;
  labels: Record<string, string>;
  network: string;
  docker: { reachable: boolean; version?: string; error?: string };
  capacity: { units: number };
  unitCount: number;
  startedAt: string;
  updatedAt: string;
  /** Set while an operator drains the machine (PUT /cluster/machines/:id/drain). */
  drain?: { machine: string; since: string; reason?: string };
}

export interface UnitProgress {
  unit: string;
  machine: string;
  active: string;
  sub: string;
  error?: string;
}

export interface Deployment {
  id: string;
  service: string;
  release: number;
  image: string;
  state: string;
  trigger: string;
  units: UnitProgress[];
  reason?: string;
  createdAt: string;
  updatedAt: string;
  finishedAt?: string;
}

export interface JournalEntry {
  id: string;
  at: string;
  service?: string;
  deployment?: string;
  kind: string;
  message: string;
}

export interface Release {
  service: string;
  version: number;
  image: string;
  digest: string;
  tag?: string;
  config: ServiceConfig;
  deployment: string;
  rollbackOf?: number;
  createdAt: string;
}

export interface DeployReply {
  /** created: a new release deploys; unchanged: that image and config already run or deploy; stale: an older push, ignored. */
  outcome?: string;
  release: string;
  version: number;
  deployment: string;
  message: string;
}

/** The first event of every stream. */
export interface Snapshot {
  revision: number;
  services: Record<string, Service>;
  units: Record<string, Unit>;
  machines: Record<string, Machine>;
  deployments: Record<string, Deployment>;
  journal: Record<string, JournalEntry>;
}

/** Every later event: one record replaced, or removed. */
export type Change<T> = { key: string; value: T; deleted?: undefined } | { key: string; deleted: true; value?: undefined };

export const finishedStates = ['succeeded', 'failed', 'reverted', 'superseded'];
export const isFinished = (deployment: Deployment): boolean => finishedStates.includes(deployment.state);
export const isRunning = (unit: { active: string; sub: string }): boolean => unit.active === 'active' && unit.sub === 'running';
