import type { ClusterUnit } from '../src/schemas/cluster.js';
import type { Deployment } from '../src/schemas/release.js';
import { openEventStream } from '../test/harness/event-stream.js';

// The cluster's units and deployments as the orchestrator's GET /events stream (the dashboard's)
// reports them, so a benchmark stops its clock on the event that completes a deploy. Polling
// GET /services/:name/units every 10 ms instead costs the orchestrator, the directory and etcd a
// request each time, on the same two cores that create the containers being timed (and polling
// the scheduler for a deployment's state adds its reads to the store reads being counted).

export interface ClusterView {
  units: ClusterUnit[];
  deployments: Map<string, Deployment>;
}

export interface ClusterEvents {
  /** Resolves with the time (performance.now()) of the event after which `done` holds. */
  until(done: (view: ClusterView) => boolean, timeoutMs?: number): Promise<number>;
  close(): void;
}

export async function watchCluster(orchestratorUrl: string): Promise<ClusterEvents> {
  const stream = await openEventStream(orchestratorUrl);
  const snapshot = await stream.next('snapshot');
  const units = new Map<string, ClusterUnit>(Object.entries(snapshot.data.units as Record<string, ClusterUnit>));
  const deployments = new Map<string, Deployment>(Object.entries(snapshot.data.deployments as Record<string, Deployment>));
  const waiters = new Set<() => void>();
  stream.onEvent((event) => {
    const records: Map<string, unknown> | undefined = event.event === 'unit' ? units : event.event === 'deployment' ? deployments : undefined;
    if (!records) return;
    if (event.data.deleted) records.delete(event.data.key);
    else records.set(event.data.key, event.data.value);
    for (const check of waiters) check();
  });
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
    close: () => stream.close(),
  };
}
