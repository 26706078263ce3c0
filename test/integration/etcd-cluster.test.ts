import t from 'tap';
import { startTestHosts } from '../harness/test-hosts.js';
import { startEtcdCluster, type EtcdCluster } from '../harness/etcd.js';
import { hostServices } from '../harness/host-services.js';
import { freePort } from '../harness/free-port.js';
import { http, serveRole } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';

// etcd as a cluster: three members, one per test host (on the host's address, ports 2379/2380),
// agents on the same hosts, and the directory, scheduler and orchestrator outside them, every
// process given all three members' URLs. Killing the leader member must cost no more than an
// election; with one member down the other two carry on.

let etcd: EtcdCluster | undefined;
const cluster = await startTestHosts({
  count: 3,
  etcd: async (hosts) => {
    etcd = await startEtcdCluster(hosts.map((host) => ({ name: host.name, address: host.address })));
    return etcd;
  },
});
const members = etcd!;
const directory = await serveRole('directory', await freePort(), cluster.flags, cluster.env);
const scheduler = await serveRole('scheduler', await freePort(), cluster.flags, cluster.env);
const orchestrator = await serveRole('orchestrator', await freePort(), cluster.flags, cluster.env);
t.teardown(async () => {
  await Promise.all([orchestrator, scheduler, directory].map((role) => role.stop()));
  await cluster.stop();
});
const orch = (path: string) => `${orchestrator.url}${path}`;
const services = hostServices(orchestrator.url, cluster);

/** Deploy ids of `service`, and its journal, as the orchestrator reads them. */
const history = async (service: string) => ({
  deployments: ((await http('GET', orch(`/deployments?service=${service}`))).body as { id: string; state: string }[]).map((d) => `${d.id} ${d.state}`).sort(),
  journal: ((await http('GET', orch(`/journal?service=${service}`))).body as { id: string }[]).map((entry) => entry.id).sort(),
});

let written: Awaited<ReturnType<typeof history>> | undefined;

t.test('every process takes the three members; a service deploys', async (t) => {
  t.match(cluster.flags.join(' '), new RegExp(`--etcd ${members.urls.join(',')}`), 'the URLs of all three members');
  await services.declareAndDeploy('before', 3);
  t.equal((await services.settled('before', 3)).length, 3);
  written = await history('before');
  t.ok(written.deployments.length > 0 && written.journal.length > 0, 'deployments and journal entries written');
});

t.test('killing the leader member: a deploy is accepted again within the election, nothing written before is lost', async (t) => {
  const leader = await members.leader();
  await leader.kill();
  const killedAt = Date.now();
  // Declared once: a declaration the store took whose answer was lost is found declared (409).
  await waitFor(async () => {
    const created = await http('POST', orch('/services'), { name: 'after', description: 'x', containerRepository: `${cluster.registry.host}/${cluster.repository}`, loadBalanced: true, publicFacing: false, numInstances: 2 });
    return created.status === 201 || created.status === 409;
  }, 30_000, { intervalMs: 100, what: 'a declaration accepted' });
  const deployment = await waitFor(async () => services.deploy('after'), 30_000, { intervalMs: 100, what: 'a deploy accepted' });
  const seconds = (Date.now() - killedAt) / 1000;
  t.ok(seconds <= 10, `a deploy accepted ${seconds.toFixed(1)} s after the leader member (${leader.name}) was killed`);
  await services.succeeded(deployment);
  t.equal((await services.settled('after', 2)).length, 2, 'its units run');
  const newLeader = await members.leader();
  t.not(newLeader.name, leader.name, `${newLeader.name} leads now`);

  const now = await history('before');
  t.same(now.deployments, written!.deployments, 'every deployment record written before is there');
  t.ok(written!.journal.every((id) => now.journal.includes(id)), 'every journal entry written before is there');
  t.equal((await services.settled('before', 3)).length, 3, 'the units deployed before still run');
});

t.test('with one member down the platform goes on with two', async (t) => {
  await services.declareAndDeploy('two-members', 3);
  t.equal((await services.settled('two-members', 3)).length, 3);
  const machines = (await http('GET', orch('/cluster/machines'))).body as { id: string }[];
  t.equal(machines.length, 3, 'every agent keeps its machine registered, the one beside the dead member too');
  for (const name of ['before', 'after', 'two-members']) t.equal((await http('DELETE', orch(`/services/${name}`))).status, 204, `${name} deleted`);
});
