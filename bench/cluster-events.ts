import { setTimeout as sleep } from 'node:timers/promises';
import type { ClusterUnit } from '../src/schemas/cluster.js';
import type { Deployment } from '../src/schemas/release.js';
import { openEventStream, type EventStream, type ServerSentEvent } from '../test/harness/event-stream.js';

// The cluster's units and deployments as the orchestrator's GET /events stream (the dashboard's)
// reports them, so a benchmark stops its clock on the event that completes a deploy. Polling
// GET /services/:name/units every 10 ms instead costs the orchestrator, the directory and etcd a
// request each time, on the same two cores that create the containers being timed (and polling
// the scheduler for a deployment's state adds its reads to the store reads being counted).
// The orchestrator ends every stream when its copies may have missed changes (its store ping
// failed: under heavy load, bench/scale.ts), as the dashboard expects; like the dashboard, the
// view then opens the stream again and starts over from the new snapshot.

export interface ClusterView {
  units: ClusterUnit[];
  deployments: Map<string, Deployment>;
}

export interface ClusterEvents {
  /** Resolves with the time (performance.now()) of the event after which `done` holds. */
  until(done: (view: ClusterView) => boolean, timeoutMs?: number): Promise<number>;
  /** How often the orchestrator ended the stream and the view opened it again. */
  reopened(): number;
  close(): void;
}

export async function watchCluster(orchestratorUrl: string): Promise<ClusterEvents> {
  const units = new Map<string, ClusterUnit>();
  const deployments = new Map<string, Deployment>();
  const waiters = new Set<() => void>();
  let stream: EventStream | undefined;
  let closed = false;
  let reopened = 0;
  let snapshotSeen: () => void = () => undefined;

  const apply = (event: ServerSentEvent) => {
    if (event.event === 'snapshot') {
      units.clear();
      deployments.clear();
      for (const [key, unit] of Object.entries(event.data.units as Record<string, ClusterUnit>)) units.set(key, unit);
      for (const [key, deployment] of Object.entries(event.data.deployments as Record<string, Deployment>)) deployments.set(key, deployment);
      snapshotSeen();
    } else {
      const records: Map<string, unknown> | undefined = event.event === 'unit' ? units : event.event === 'deployment' ? deployments : undefined;
      if (!records) return;
      if (event.data.deleted) records.delete(event.data.key);
      else records.set(event.data.key, event.data.value);
    }
    for (const check of waiters) check();
  };

  /** Opens the stream and resolves once its snapshot is applied; when the server ends it, opens it again. */
  const follow = async (): Promise<void> => {
    const snapshot = new Promise<void>((resolve) => (snapshotSeen = resolve));
    const opened = await openEventStream(orchestratorUrl);
    stream = opened;
    // Registered before any event is read on: the snapshot and what follows it arrive through `apply` in order.
    opened.onEvent(apply);
    for (const event of opened.events) apply(event);
    void opened.ended.then(reopen);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('no snapshot within 60 s on GET /events')), 60_000)));
    await Promise.race([snapshot, late]).finally(() => clearTimeout(timer));
  };
  const reopen = async (): Promise<void> => {
    while (!closed) {
      try {
        reopened += 1;
        await follow();
        return;
      } catch {
        await sleep(1_000);
      }
    }
  };
  await follow();

  return {
    until(done, timeoutMs = 120_000) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`the cluster did not reach the expected state within ${timeoutMs} ms`));
        }, timeoutMs);
        const check = () => {
          if (!done({ units: [...units.values()], deployments })) return;
          clearTimeout(timer);
          waiters.delete(check);
          resolve(performance.now());
        };
        waiters.add(check);
        check();
      });
    },
    reopened: () => reopened,
    close: () => {
      closed = true;
      stream?.close();
    },
  };
}
