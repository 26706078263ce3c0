import t from 'tap';
import { randomBytes } from 'node:crypto';
import { startEtcd } from '../harness/etcd.js';
import { startDockerd } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { http, serveRole, type PlatformProcess } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';
import { clusterUnits, isRunning } from '../harness/cluster-units.js';

// Services deployed at the same instant, on real parts: three agents on one real Docker engine
// (each reporting 300 MB for units), a real etcd and registry, one scheduler. Their rollouts plan
// side by side; the scheduler's plan applier commits them one at a time, so a machine never gets
// two units that conflict or more memory than it has. (Host ports need an engine per machine:
// plan-applier.test.ts covers them on a real etcd.)

const TTL = 3;
const etcd = await startEtcd();
const registry = await startRegistry();
const engine = await startDockerd();
const repository = `concurrent/app-${randomBytes(3).toString('hex')}`;
const serving = await buildTestImage(engine.docker, registry.host, repository, 'ok');
const flags = ['--etcd', etcd.url, '--announce-ttl', String(TTL)];
const machineIds = ['m1', 'm2', 'm3'];
type Role = PlatformProcess & { url: string };
const agents: Role[] = [];
for (const id of machineIds) {
  agents.push(
    await serveRole('agent', await freePort(), [...flags, '--network', 'host', '--machine-id', id, '--stop-grace', '1', '--drain-seconds', '0', '--capacity-memory', '300'], {
      DOCKER_HOST: engine.dockerHost,
    }),
  );
}
const directory = await serveRole('directory', await freePort(), flags);
const orchestrator = await serveRole('orchestrator', await freePort(), flags);
const scheduler = await serveRole('scheduler', await freePort(), flags);
t.teardown(async () => {
  await Promise.all([...agents, directory, orchestrator, scheduler].map((role) => role.stop()));
  await Promise.all([registry.stop(), etcd.stop()]);
  await engine.stop();
});

const orch = (path: string) => `${orchestrator.url}${path}`;
const { unitsOf, finished } = clusterUnits(orchestrator.url);

await waitFor(async () => ((await http('GET', orch('/cluster/machines'))).body as unknown[]).length === 3, 30_000, { what: 'three machines registered' });

async function declare(name: string, body: Record<string, unknown>): Promise<void> {
  const created = await http('POST', orch('/services'), { name, containerRepository: `${registry.host}/${repository}`, ...body });
  if (created.status !== 201) throw new Error(JSON.stringify(created.body));
}

/** Deploys every service at the same instant and waits for every deployment to end. */
async function deployAtOnce(services: string[]): Promise<Map<string, { state: string; reason?: string }>> {
  const ids = await Promise.all(
    services.map(async (service) => {
      const reply = await http('POST', orch(`/services/${service}/deploy`), { containerRepository: serving.reference });
      if (reply.status !== 200) throw new Error(JSON.stringify(reply.body));
      return reply.body.deployment as string;
    }),
  );
  const outcomes = await Promise.all(ids.map((id) => finished(id)));
  return new Map(services.map((service, i) => [service, outcomes[i]!]));
}

/** Machine of each unit of the services, as the orchestrator lists them. */
const machinesOf = async (services: string[]): Promise<string[]> => (await Promise.all(services.map(unitsOf))).flat().map((unit) => unit.machine);

const remove = async (names: string[]) => {
  for (const name of names) t.equal((await http('DELETE', orch(`/services/${name}`))).status, 204, `${name} deleted`);
};

const conflictRounds = 3;
for (let round = 1; round <= conflictRounds; round++) {
  t.test(`round ${round}: six one-unit services that conflict with each other (conflictsWith ex-*), deployed at once on 3 machines: one per machine, the rest fail`, async (t) => {
    const names = ['a', 'b', 'c', 'd', 'e', 'f'].map((x) => `ex${round}-${x}`);
    for (const name of names) await declare(name, { conflictsWith: `ex${round}-*` });
    const outcomes = await deployAtOnce(names);
    const machines = await machinesOf(names);
    t.comment(`units per machine: ${machineIds.map((id) => machines.filter((m) => m === id).length).join(', ')}`);
    t.equal(new Set(machines).size, machines.length, `never two on one machine (${machines.join(', ')})`);
    const succeeded = names.filter((name) => outcomes.get(name)!.state === 'succeeded');
    t.equal(succeeded.length, 3, 'three run, one per machine');
    for (const name of names.filter((n) => !succeeded.includes(n))) {
      t.match(outcomes.get(name), { state: 'failed', reason: new RegExp(`^${name} needs 1 machines free of ex${round}-\\*; 0 qualify`) }, `${name} fails naming the conflict`);
    }
    for (const name of succeeded) t.ok((await unitsOf(name)).every(isRunning), `${name} runs`);
    await remove(names);
  });
}

t.test('four 200 MB services deployed at once on three 300 MB machines: one per machine, the fourth fails naming memory', async (t) => {
  const names = [1, 2, 3, 4].map((i) => `mem-${i}`);
  for (const name of names) await declare(name, { resources: { memoryMB: 200 } });
  const outcomes = await deployAtOnce(names);
  const machines = await machinesOf(names);
  t.comment(`units per machine: ${machineIds.map((id) => machines.filter((m) => m === id).length).join(', ')}`);
  t.equal(new Set(machines).size, machines.length, `no machine holds 400 MB of 300 (${machines.join(', ')})`);
  const failed = names.filter((name) => outcomes.get(name)!.state !== 'succeeded');
  t.equal(failed.length, 1, 'three run');
  t.match(outcomes.get(failed[0]!), { state: 'failed', reason: /needs 200 MB; the most free on any machine is 100 MB/ });
  await remove(names);
});
