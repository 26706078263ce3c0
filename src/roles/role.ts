import type { FastifyBaseLogger } from 'fastify';
import type { PlatformConfig } from '../config.js';
import type { Store } from '../store/store.js';
import type { RoleServer } from '../http/server.js';
import type { AccessControl } from '../auth/guard.js';
import type { StoreSpace } from '../store/store-space.js';
import type { WriteBudget } from '../auth/write-budget.js';

/** What every role's start function receives. */
export interface RoleContext {
  config: PlatformConfig;
  store: Store;
  log: FastifyBaseLogger;
  /** host:port other roles reach this role at. */
  advertised: string;
  /** Who may call the role's API: every role server of the process shares it. */
  access: AccessControl;
  /** The store's size against --store-space-limit, read once per process. */
  storeSpace: StoreSpace;
  /** What each token's calls may make the store keep; one per process. */
  writeBudget: WriteBudget;
}

/**
 * Why a process stops. `restart` (SIGTERM: systemd's restart, `platform up` run again, an upgrade;
 * and a failed start, which a supervisor follows with another): what the next process adopts is
 * left running, as agents leave their units; the gateway leaves its HAProxy serving. `stop`
 * (SIGINT, systemd's stop): everything the role began stops.
 */
export type StopReason = 'stop' | 'restart';

/** A started role: not yet listening; `close` stops what `listen` and the start function began. */
export interface StartedRole {
  listen(host: string, port: number): Promise<void>;
  /** Work that must wait until the role listens (e.g. campaigning to lead and announcing). */
  start?(): Promise<void>;
  close(reason?: StopReason): Promise<void>;
  /** The role writes its own announcement (the scheduler: only while it leads). */
  selfAnnounced?: boolean;
}

/** The common case: a Fastify role server plus whatever else the role must stop. */
export const fastifyRole = (server: RoleServer, stop: () => Promise<void> = async () => undefined): StartedRole => ({
  listen: async (host, port) => {
    await server.listen({ host, port });
  },
  close: async () => {
    await server.close();
    await stop();
  },
});

export const storeReadiness = (store: Store, space?: StoreSpace) => async (): Promise<Record<string, unknown>> => {
  await store.ping();
  return { store: store.description, ...(space ? await space.readiness() : {}) };
};
