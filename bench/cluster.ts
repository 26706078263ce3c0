import { randomBytes } from 'node:crypto';
import { EtcdStore } from '../src/store/etcd-store.js';
import { assignmentKey } from '../src/store/keys.js';
import type { Operation } from '../src/store/store.js';
import { startEtcd } from '../test/harness/etcd.js';
import { startDockerd } from '../test/harness/docker.js';
import { startRegistry } from '../test/harness/registry.js';
import { buildTestImage } from '../test/harness/test-image.js';
import { freePort } from '../test/harness/free-port.js';
import { http, serveRole, type PlatformProcess } from '../test/harness/platform.js';
import { waitFor } from '../test/harness/wait.js';
import { median, printTable, type BenchRow } from './table.js';

// Issue 4's store and failover benchmarks on real parts: 10,000 unit assignments written to etcd
// in batched transactions (against single puts, same run), and the time from kill -9 of an agent
// to all its units running on the other machines (3 machines, each its own Docker engine).

const rows: BenchRow[] = [];
const ASSIGNMENTS = 10_000;
const BATCH = 100; // below etcd's default --max-txn-ops of 128

const etcd = await startEtcd();
const store = new EtcdStore([etcd.url]);
const assignment = (i: number) => ({ unit: `svc-${i % 500}-${i}.service`, machine: `machine-${i % 50}`, spec: 'bench', release: 1 });
const batched = performance.now();
for (let start = 0; start < ASSIGNMENTS; start += BATCH) {
  const ops: Operation[] = [];
  for (let i = start; i < start + BATCH; i++) {
    const a = assignment(i);
    ops.push({ op: 'put', key: assignmentKey(a.machine, `${a.unit}@bench`), value: JSON.stringify(a) });
  }
  await store.txn([], ops);
}
const batchedRate = ASSIGNMENTS / ((performance.now() - batched) / 1000);
const SINGLE = 2_000;
const single = performance.now();
for (let i = 0; i < SINGLE; i++) {
  const a = assignment(i);
  await store.put(assignmentKey(a.machine, `${a.unit}@single`), JSON.stringify(a));
}
const singleRate = SINGLE / ((performance.now() - single) / 1000);
rows.push({
  benchmark: `store: ${ASSIGNMENTS.toLocaleString('en')} assignments to etcd, transactions of ${BATCH}`,
  platform: `${Math.round(batchedRate).toLocaleString('en')} assignments/s`,
  reference: `${Math.round(singleRate).toLocaleString('en')}/s (one put each, ${SINGLE.toLocaleString('en')} puts)`,
  ratio: `${(batchedRate / singleRate).toFixed(1)}x`,
  target: '-',
});
await store.deletePrefix('/platform/assignments/');
await store.close();

// Failover: three machines, kill -9 the agent of one, time until its units run elsewhere.
const TTL = 10;
const ROUNDS = 5;
const UNITS = 6;
const registry = await startRegistry();
const engines = await Promise.all([startDockerd(), startDockerd(), startDockerd()]);
const image = await buildTestImage(engines[0]!.docker, registry.host, 'bench/failover', 'v1');
const flags = ['--etcd', etcd.url, '--announce-ttl', String(TTL)];
const machineIds = ['f1', 'f2', 'f3'];
const startAgent = async (i: number) =>
  serveRole('agent', await freePort(), [...flags, '--network', 'host', '--machine-id', machineIds[i]!, '--stop-grace', '1', '--drain-seconds', '0'], { DOCKER_HOST: engines[i]!.dockerHost });
const agents: PlatformProcess[] = [];
for (let i = 0; i < 3; i++) agents.push(await startAgent(i));
const directory = await serveRole('directory', await freePort(), flags);
const scheduler = await serveRole('scheduler', await freePort(), flags);
const orchestrator = await serveRole('orchestrator', await freePort(), flags);
const service = `failover-${randomBytes(2).toString('hex')}`;
await http('POST', `${directory.url}/services`, { name: service, containerImage: `${registry.host}/bench/failover`, numInstances: UNITS });
await http('POST', `${scheduler.url}/hooks/deploy`, { serviceName: service, containerRepository: image.reference, pushedAt: 0 });

type Unit = { machine: string; active: string; sub: string };
const units = async () => (await http('GET', `${orchestrator.url}/services/${service}/units`)).body as Unit[];
const allRunning = (list: Unit[], avoid?: string) => list.length === UNITS && list.every((u) => u.active === 'active' && u.sub === 'running' && u.machine !== avoid);

const seconds: number[] = [];
for (let round = 0; round < ROUNDS; round++) {
  const before = await waitFor(async () => {
    const list = await units();
    return allRunning(list) && new Set(list.map((u) => u.machine)).size === 3 ? list : undefined;
  }, 120_000, { what: 'units on all three machines' });
  const victim = machineIds.indexOf(before[round % before.length]!.machine);
  await agents[victim]!.stop('SIGKILL');
  const killed = performance.now();
  await waitFor(async () => allRunning(await units(), machineIds[victim]), 60_000, { intervalMs: 50, what: 'units moved' });
  seconds.push((performance.now() - killed) / 1000);
  agents[victim] = await startAgent(victim);
  // Spread the units again for the next round: scale to 0 and back.
  await http('PATCH', `${directory.url}/services/${service}/config`, { numInstances: 0 });
  await http('POST', `${scheduler.url}/hooks/deploy`, { serviceName: service, containerRepository: image.reference, pushedAt: 0 });
  await waitFor(async () => (await units()).length === 0, 60_000);
  await http('PATCH', `${directory.url}/services/${service}/config`, { numInstances: UNITS });
  await http('POST', `${scheduler.url}/hooks/deploy`, { serviceName: service, containerRepository: image.reference, pushedAt: 0 });
}
rows.push({
  benchmark: `failover: agent kill -9 → its units running elsewhere (lease TTL ${TTL} s), median of ${ROUNDS}`,
  platform: `${median(seconds).toFixed(1)} s (${seconds.map((s) => s.toFixed(1)).join(', ')})`,
  reference: 'Nomad about 20 s, Kubernetes about 5 min (defaults)',
  ratio: '-',
  target: '<= 15 s',
});

printTable(rows);
await Promise.all([...agents, directory, scheduler, orchestrator].map((role) => role.stop()));
await Promise.all([registry.stop(), etcd.stop()]);
await Promise.all(engines.map((engine) => engine.stop()));
