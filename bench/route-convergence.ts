import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Store } from '../src/store/store.js';
import { serviceKey, unitStatusKey } from '../src/store/keys.js';
import { startLoad } from '../test/harness/http-load.js';
import { waitFor } from '../test/harness/wait.js';
import { percentile, type BenchRow } from './table.js';

// Route convergence through a gateway: how long from a unit's status write in the store until the
// unit gets its first request, and from its `deactivating` write until the last new request
// reaches it. One unit stays routable, the other is switched on and off while a client loop
// (4 workers) keeps sending; the units are Node servers on 127.0.0.1 that note when each request
// arrives, their statuses written as an agent writes them.

export interface Convergence {
  /** ms from the `active` write to the unit's first request. */
  up: number[];
  /** ms from the `deactivating` write to the last request that reached the unit. */
  down: number[];
}

async function unitServer(arrivals: number[]): Promise<{ server: Server; address: string }> {
  const server = createServer((_req, res) => {
    arrivals.push(performance.timeOrigin + performance.now());
    res.end('ok\n');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, address: `127.0.0.1:${(server.address() as AddressInfo).port}` };
}

const now = () => performance.timeOrigin + performance.now();

export async function measureConvergence(store: Store, gatewayPort: number, service: string, changes: number): Promise<Convergence> {
  const steady: number[] = [];
  const toggled: number[] = [];
  const a = await unitServer(steady);
  const b = await unitServer(toggled);
  const status = (instance: number, address: string, active: 'active' | 'deactivating') =>
    store.put(unitStatusKey('bench', `${service}-${instance}.service@x`), JSON.stringify({ unit: `${service}-${instance}.service`, service, instance, machine: 'bench', active, sub: 'running', address }));
  // A whole service record (the orchestrator's event stream reads its config), not only what the gateway reads.
  const at = new Date().toISOString();
  const record = { name: service, uuid: randomUUID(), description: '', containerImage: `bench.test/${service}`, autoDeploy: 'always', conflictsWith: '', loadBalanced: true, publicFacing: false, config: { numInstances: 2, ports: [], env: {} }, createdAt: at, updatedAt: at };
  await store.put(serviceKey(service), JSON.stringify(record));
  await status(1, a.address, 'active');
  await status(2, b.address, 'deactivating');
  await waitFor(() => steady.length > 0, 20_000, { what: 'the steady unit to be routed' }).catch(() => undefined);
  const load = startLoad({ url: `http://127.0.0.1:${gatewayPort}/`, host: `${service}.platform.internal`, concurrency: 4, maxDurationMs: changes * 1_000 });
  await waitFor(() => steady.length > 50, 20_000, { what: 'requests to reach the steady unit' });
  const result: Convergence = { up: [], down: [] };
  try {
    for (let change = 0; change < changes; change += 2) {
      const seen = toggled.length;
      const upAt = now();
      await status(2, b.address, 'active');
      await waitFor(() => toggled.length > seen, 5_000, { intervalMs: 1, what: 'the unit to get a request' });
      result.up.push(toggled[seen]! - upAt);
      await sleep(20);
      const downAt = now();
      await status(2, b.address, 'deactivating');
      await sleep(200);
      result.down.push(Math.max(0, toggled.at(-1)! - downAt));
    }
  } finally {
    await load.stop();
    await store.delete(serviceKey(service));
    for (const instance of [1, 2]) await store.delete(unitStatusKey('bench', `${service}-${instance}.service@x`));
    for (const { server } of [a, b]) {
      server.closeAllConnections();
      server.close();
    }
  }
  return result;
}

/** Both convergence figures through the gateway on `port` (its `plane`) as benchmark rows, `context` added to their names (e.g. how many routes it holds). */
export async function convergenceRows(store: Store, port: number, plane: string, changes: number, context = ''): Promise<BenchRow[]> {
  const { up, down } = await measureConvergence(store, port, `converge-${plane}`, changes);
  return (
    [
      ['status write -> first routed request', up],
      ['deactivating write -> last new request', down],
    ] as const
  ).map(([what, values]) => ({
    benchmark: `route convergence, ${plane} data plane${context}: ${what} (${values.length} changes)`,
    platform: `p50 ${percentile(values, 50).toFixed(2)} ms, p99 ${percentile(values, 99).toFixed(2)} ms`,
    reference: '-',
    ratio: '-',
    target: 'p99 <= 50 ms',
  }));
}
