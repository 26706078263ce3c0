import t from 'tap';
import { randomBytes } from 'node:crypto';
import { Etcd3 } from 'etcd3';
import { startEtcd } from '../harness/etcd.js';
import { startDockerd, type DockerEngine } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { http, serveRole, type PlatformProcess } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';
import { clusterUnits, isRunning } from '../harness/cluster-units.js';

// A cluster of three machines, each an agent with its own Docker engine (own socket, data root
// and exec root), on a real etcd, with two schedulers: placement with conflicts, self-healing
// when a machine dies, restarts of killed units, and scheduler failover mid-rollout.

const TTL = 3;
const etcd = await startEtcd();
const registry = await startRegistry();
const engines = await Promise.all([startDockerd(), startDockerd(), startDockerd()]);
const repository = `cluster/web-${randomBytes(3).toString('hex')}`;
const [v1, v2] = await Promise.all([
  buildTestImage(engines[0]!.docker, registry.host, repository, 'v1', { label: 'one' }),
  buildTestImage(engines[0]!.docker, registry.host, repository, 'v2', { label: 'two' }),
]);
const flags = ['--etcd', etcd.url, '--announce-ttl', String(TTL)];
const machineIds = ['m1', 'm2', 'm3'];
type Role = PlatformProcess & { url: string };
const startAgent = async (index: number): Promise<Role> =>
  serveRole('agent', await freePort(), [...flags, '--network', 'host', '--machine-id', machineIds[index]!, '--stop-grace', '2', '--drain-seconds', '1'], { DOCKER_HOST: engines[index]!.dockerHost });
const agents: Role[] = [];
for (let i = 0; i < 3; i++) agents.push(await startAgent(i));
const directory = await serveRole('directory', await freePort(), flags);
const orchestrator = await serveRole('orchestrator', await freePort(), flags);
const schedulers = [await serveRole('scheduler', await freePort(), flags), await serveRole('scheduler', await freePort(), flags)];
const etcdClient = new Etcd3({ hosts: etcd.url });
t.teardown(async () => {
  etcdClient.close();
  await Promise.all([...agents, directory, orchestrator, ...schedulers].map((role) => role.stop()));
  await Promise.all([registry.stop(), etcd.stop()]);
  await Promise.all(engines.map((engine) => engine.stop()));
});

const orch = (path: string) => `${orchestrator.url}${path}`;
const { unitsOf, settled, finished } = clusterUnits(orchestrator.url);

async function declare(name: string, numInstances: number, conflictsWith = ''): Promise<void> {
  const created = await http('POST', orch('/services'), { name, description: 'cluster', containerRepository: `${registry.host}/${repository}`, loadBalanced: true, publicFacing: false, numInstances, conflictsWith });
  if (created.status !== 201) throw new Error(JSON.stringify(created.body));
}

async function deployAndWait(service: string, image = v1, via = orchestrator.url): Promise<{ state: string; reason?: string; id: string }> {
  const reply = via === orchestrator.url
    ? await http('POST', `${via}/services/${service}/deploy`, { containerRepository: image.reference })
    : await http('POST', `${via}/hooks/deploy`, { serviceName: service, containerRepository: image.reference, pushedAt: 0 });
  if (reply.status !== 200) throw new Error(JSON.stringify(reply.body));
  return finished(reply.body.deployment);
}

const containersOn = async (engine: DockerEngine, service: string) =>
  engine.docker.listContainers({ all: true, filters: { label: [`platform.service=${service}`] } });

t.test('three machines register with their Docker engines', async (t) => {
  const machines = await waitFor(async () => {
    const listed = (await http('GET', orch('/cluster/machines'))).body as { id: string; docker: { reachable: boolean; version: string } }[];
    return listed.length === 3 ? listed : undefined;
  }, 15_000);
  t.same(machines.map((m) => m.id).sort(), machineIds);
  t.ok(machines.every((m) => m.docker.reachable && m.docker.version), 'each reports its engine version');
});

t.test('a self-conflicting service gets one unit per machine; a fourth unit fails with the reason', async (t) => {
  await declare('spread', 3, 'spread');
  t.equal((await deployAndWait('spread')).state, 'succeeded');
  const units = await settled('spread', 3);
  t.same(units.map((u) => u.machine).sort(), machineIds, 'one unit on each machine');

  await http('PATCH', orch('/services/spread/config/next'), { numInstances: 4 });
  const outcome = await deployAndWait('spread');
  t.equal(outcome.state, 'reverted');
  t.match(outcome.reason, /spread needs 4 machines free of spread; 3 qualify/);
  t.equal((await settled('spread', 3)).length, 3, 'the three units kept running');
});

t.test('two services that conflict with each other never share a machine', async (t) => {
  await declare('left', 1, 'right');
  await declare('right', 2);
  t.equal((await deployAndWait('left')).state, 'succeeded');
  t.equal((await deployAndWait('right')).state, 'succeeded');
  const left = await settled('left', 1);
  const right = await settled('right', 2);
  t.notOk(right.some((u) => u.machine === left[0]!.machine), `left on ${left[0]!.machine}, right on ${right.map((u) => u.machine).join(', ')}`);
  for (const name of ['spread', 'left', 'right']) t.equal((await http('DELETE', orch(`/services/${name}`))).status, 204);
});

t.test('a killed container runs again, and its restart count shows', async (t) => {
  await declare('crashy', 1);
  t.equal((await deployAndWait('crashy')).state, 'succeeded');
  const [unit] = await settled('crashy', 1);
  const engine = engines[machineIds.indexOf(unit!.machine)]!;
  const [container] = await containersOn(engine, 'crashy');
  await engine.docker.getContainer(container!.Id).kill();
  const after = await waitFor(async () => (await unitsOf('crashy')).find((u) => isRunning(u) && u.restarts >= 1), 30_000, { what: 'unit restarted' });
  t.equal(after.machine, unit!.machine, 'restarted in place');
  t.equal((await http('DELETE', orch('/services/crashy'))).status, 204);
});

t.test('draining a machine moves its units away, each replacement running before the unit it replaces stops', async (t) => {
  await declare('moving', 2);
  t.equal((await deployAndWait('moving')).state, 'succeeded');
  const before = await settled('moving', 2);
  const drained = before[0]!.machine;
  // Sample the running units while the drain happens: never fewer than the two wanted.
  let fewest = Infinity;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      fewest = Math.min(fewest, (await unitsOf('moving')).filter(isRunning).length);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  })();

  const reply = await http('PUT', orch(`/cluster/machines/${drained}/drain`), { reason: 'kernel upgrade' });
  t.equal(reply.status, 200);
  t.match(reply.body, { machine: drained, reason: 'kernel upgrade', since: String });
  const listed = (await http('GET', orch('/cluster/machines'))).body as { id: string; drain?: { reason?: string } }[];
  t.equal(listed.find((m) => m.id === drained)?.drain?.reason, 'kernel upgrade', 'the machine listing shows the drain');

  const moved = await waitFor(async () => {
    const units = await unitsOf('moving');
    return units.length === 2 && units.every(isRunning) && units.every((u) => u.machine !== drained) ? units : undefined;
  }, 60_000, { what: `units of moving off ${drained}` });
  await waitFor(async () => (await containersOn(engines[machineIds.indexOf(drained)]!, 'moving')).length === 0, 30_000, { what: `containers gone from ${drained}` });
  sampling = false;
  await sampler;
  t.equal(fewest, 2, 'two units ran throughout the drain');
  t.ok(moved.every((u) => u.machine !== drained), `units now on ${moved.map((u) => u.machine).join(', ')}`);
  const journal = (await http('GET', orch('/journal?service=moving'))).body as { kind: string; message: string }[];
  t.ok(journal.some((entry) => entry.kind === 'service.rescheduled' && entry.message.includes(`off ${drained}`)), 'the journal says why the units moved');

  await http('PATCH', orch('/services/moving/config/next'), { numInstances: 4 });
  t.equal((await deployAndWait('moving')).state, 'succeeded');
  t.notOk((await settled('moving', 4)).some((u) => u.machine === drained), 'a drained machine gets no new unit');

  t.equal((await http('PUT', orch('/cluster/machines/no-such-machine/drain'), {})).status, 404);
  const invalid = await http('PUT', orch('/cluster/machines/bad%20id/drain'), {});
  t.equal(invalid.status, 400);
  t.match(invalid.body.message, /id/);
  t.equal((await http('DELETE', orch(`/cluster/machines/${drained}/drain`))).status, 204);
  const after = (await http('GET', orch('/cluster/machines'))).body as { id: string; drain?: unknown }[];
  t.notOk(after.find((m) => m.id === drained)?.drain, 'undrained');
  const bare = await http('PUT', orch(`/cluster/machines/${drained}/drain`));
  t.equal(bare.status, 200, 'a PUT without a body drains too');
  t.equal((await http('DELETE', orch(`/cluster/machines/${drained}/drain`))).status, 204);
  t.equal((await http('DELETE', orch('/services/moving'))).status, 204);
});

t.test('kill -9 of an agent: its units run elsewhere within 15 s; when it returns its stale containers go', async (t) => {
  await declare('heal', 3);
  t.equal((await deployAndWait('heal')).state, 'succeeded');
  const before = await settled('heal', 3);
  const victim = before[0]!.machine;
  const index = machineIds.indexOf(victim);
  await agents[index]!.stop('SIGKILL');
  const killedAt = Date.now();
  const healed = await waitFor(async () => {
    const units = await unitsOf('heal');
    return units.length === 3 && units.every(isRunning) && units.every((u) => u.machine !== victim) ? units : undefined;
  }, 20_000, { what: 'units moved off the dead machine' });
  const seconds = (Date.now() - killedAt) / 1000;
  t.ok(seconds <= 15, `running elsewhere ${seconds.toFixed(1)} s after kill -9 (lease TTL ${TTL} s)`);
  t.same(healed.map((u) => u.instance).sort(), [1, 2, 3]);
  t.equal((await containersOn(engines[index]!, 'heal')).length, 1, 'the dead agent left its container running');

  agents[index] = await startAgent(index);
  await waitFor(async () => (await containersOn(engines[index]!, 'heal')).length === 0, 30_000, { what: 'stale container removed' });
  t.pass('the returning agent removed the container of the unit that moved away');
  t.equal((await settled('heal', 3)).filter((u) => u.machine === victim).length, 0);
  t.equal((await http('DELETE', orch('/services/heal'))).status, 204);
});

t.test('two schedulers: work sent to the follower is done by the leader; kill -9 of the leader mid-rollout', async (t) => {
  const leaderOf = async () => {
    const states = await Promise.all(schedulers.map(async (s) => (await http('GET', `${s.url}/readyz`)).body.leader as boolean));
    return states.indexOf(true);
  };
  const leader = await waitFor(async () => {
    const index = await leaderOf();
    return index >= 0 ? index + 1 : undefined;
  }, 10_000) - 1;
  const follower = 1 - leader;
  t.equal((await http('GET', `${schedulers[follower]!.url}/readyz`)).body.leader, false, 'the other one follows');

  await declare('roll', 6);
  t.equal((await deployAndWait('roll', v1, schedulers[follower]!.url)).state, 'succeeded', 'a deploy sent to the follower was carried out');
  await settled('roll', 6, 1);

  await http('PATCH', orch('/services/roll/config/next'), { minReadySeconds: 1, env: { GREETING: 'again' } });
  const reply = await http('POST', `${schedulers[leader]!.url}/hooks/deploy`, { serviceName: 'roll', containerRepository: v2.reference, pushedAt: 0 });
  t.equal(reply.status, 200);
  await waitFor(async () => (await unitsOf('roll')).some((u) => u.release === 2 && isRunning(u)), 30_000, { what: 'the rollout under way' });
  await schedulers[leader]!.stop('SIGKILL');
  const killedAt = Date.now();
  await waitFor(async () => (await http('GET', `${schedulers[follower]!.url}/readyz`)).body.leader === true, (TTL + 5) * 1000, { what: 'the follower leads' });
  t.ok(Date.now() - killedAt <= (TTL + 3) * 1000, `took over ${((Date.now() - killedAt) / 1000).toFixed(1)} s after kill -9 (lease TTL ${TTL} s)`);
  const deployment = await waitFor(async () => {
    const record = (await http('GET', orch(`/deployments/${reply.body.deployment}`))).body;
    return record.state === 'succeeded' ? record : undefined;
  }, 90_000, { what: 'the rollout finished by the new leader' });
  t.equal(deployment.release, 2);
  const units = await settled('roll', 6, 2);
  t.same(units.map((u) => u.instance).sort((a, b) => a - b), [1, 2, 3, 4, 5, 6], 'exactly six units, no duplicates');
  const containers = (await Promise.all(engines.map((engine) => containersOn(engine, 'roll')))).flat();
  t.equal(containers.length, 6, 'six containers across the machines');
  const announced = (await etcdClient.get('/platform/services/scheduler').string()) ?? '';
  t.equal(announced, schedulers[follower]!.url.replace('http://', ''), 'the new leader is announced');
});
