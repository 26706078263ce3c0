import type { ClusterUnit, Machine } from './cluster.js';
import type { Deployment, JournalEntry } from './release.js';
import type { Service } from './service.js';

// GET /events (src/roles/orchestrator/events.ts), the dashboard's stream: the records it carries
// are the API's, so its shape is told here in their types.

/** The record each kind of event carries. */
export interface EventRecords {
  service: Service;
  deployment: Deployment;
  journal: JournalEntry;
  machine: Machine;
  unit: ClusterUnit;
}

export type EventKind = keyof EventRecords;

/** The first event of every stream: each kind's records by key. */
export interface Snapshot {
  revision: number;
  services: Record<string, Service>;
  units: Record<string, ClusterUnit>;
  machines: Record<string, Machine>;
  deployments: Record<string, Deployment>;
  journal: Record<string, JournalEntry>;
}

/** Every later event: one record replaced, or removed. */
export type Change<T> = { key: string; value: T; deleted?: undefined } | { key: string; deleted: true; value?: undefined };
