import { startTestHosts, type TestHost, type TestHosts } from '../test/harness/test-hosts.js';
import { startEtcdCluster, type EtcdCluster } from '../test/harness/etcd.js';
import { hostServices } from '../test/harness/host-services.js';
import { freePort } from '../test/harness/free-port.js';
import { http, serveRole, type PlatformProcess } from '../test/harness/platform.js';
import { waitFor } from '../test/harness/wait.js';
import { untilEngineEmpty } from '../test/harness/docker.js';
import { median, printTable, type BenchRow } from './table.js';

// Issue 15's benchmarks on test hosts (network namespaces on a test bridge, each with its own
// address, dockerd and agent; default settings, lease TTL 10 s):
// - partition (link down, not a kill) of a host → its units running on the others, median of 3;
// - loss of the etcd leader member (three members, one per host) → the next deploy accepted, median of 3.

const ROUNDS = 3;
const UNITS = 6;
const rows: BenchRow[] = [];

async function platformOn(cluster: TestHosts): Promise<{ orchestrator: PlatformProcess & { url: string }; stop(): Promise<void> }> {
  const roles: (PlatformProcess & { url: string })[] = [];
  for (const role of ['directory', 'scheduler', 'orchestrator']) roles.push(await serveRole(role, await freePort(), cluster.flags, cluster.env));
  return { orchestrator: roles[2]!, stop: async () => void (await Promise.all(roles.map((role) => role.stop()))) };
}

// Partition → units elsewhere. Each round partitions a host that runs units; its units move to
// the host left empty by the round before, so no re-spreading is needed between rounds.
{
  const cluster = await startTestHosts({ count: 3 });
  const platform = await platformOn(cluster);
  const services = hostServices(platform.orchestrator.url, cluster);
  await services.declareAndDeploy('partitioned', UNITS);
  const seconds: number[] = [];
  try {
    for (let round = 0; round < ROUNDS; round++) {
      const before = await services.settled('partitioned', UNITS);
      const victim: TestHost = cluster.hosts.find((host) => before.some((u) => u.machine === host.name))!;
      victim.partition();
      const partitioned = performance.now();
      await waitFor(async () => {
        const units = await services.unitsOf('partitioned');
        return units.length === UNITS && units.every((u) => u.active === 'active' && u.sub === 'running' && u.machine !== victim.name);
      }, 60_000, { intervalMs: 50, what: `units off ${victim.name}` });
      seconds.push((performance.now() - partitioned) / 1000);
      victim.heal();
      await untilEngineEmpty(victim.engine.docker, `${victim.name} emptied after the heal`);
      await waitFor(async () => ((await http('GET', `${platform.orchestrator.url}/cluster/machines`)).body as unknown[]).length === 3, 60_000, { what: 'three machines' });
    }
  } finally {
    await platform.stop();
    await cluster.stop();
  }
  rows.push({
    benchmark: `partition of a host (link down) → its units running elsewhere, ${UNITS} units on 3 hosts, median of ${ROUNDS}`,
    platform: `${median(seconds).toFixed(1)} s (${seconds.map((s) => s.toFixed(1)).join(', ')})`,
    reference: 'agent kill -9: 8.8 s (docs/cluster.md)',
    ratio: '-',
    target: '<= 15 s',
  });
}

// etcd leader member killed → the next deploy accepted (a config change and its deploy).
{
  let etcd: EtcdCluster | undefined;
  const cluster = await startTestHosts({
    count: 3,
    etcd: async (hosts) => (etcd = await startEtcdCluster(hosts.map((host) => ({ name: host.name, address: host.address })))),
  });
  const platform = await platformOn(cluster);
  const services = hostServices(platform.orchestrator.url, cluster);
  const orch = (path: string) => `${platform.orchestrator.url}${path}`;
  await services.declareAndDeploy('elected', 2);
  const seconds: number[] = [];
  try {
    for (let round = 0; round < ROUNDS; round++) {
      const leader = await etcd!.leader();
      await leader.kill();
      const killed = performance.now();
      await waitFor(async () => (await http('PATCH', orch('/services/elected/config/next'), { env: { ROUND: String(round) } })).status === 200, 60_000, { intervalMs: 50, what: 'config accepted' });
      const deployment = await waitFor(() => services.deploy('elected'), 60_000, { intervalMs: 50, what: 'deploy accepted' });
      seconds.push((performance.now() - killed) / 1000);
      await services.succeeded(deployment);
      await leader.start();
    }
  } finally {
    await platform.stop();
    await cluster.stop();
  }
  rows.push({
    benchmark: 'etcd leader member killed (3 members) → the next deploy accepted, median of 3',
    platform: `${median(seconds).toFixed(1)} s (${seconds.map((s) => s.toFixed(1)).join(', ')})`,
    reference: "etcd's election timeout: 1 s",
    ratio: '-',
    target: '-',
  });
}

printTable(rows);
