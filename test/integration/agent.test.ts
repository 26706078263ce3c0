import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { request } from 'undici';
import { createRoleServer, type RoleServer } from '../../src/http/server.js';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import { assignmentKey, assignmentPrefix, machineKey, unitStatusPrefix } from '../../src/store/keys.js';
import { slotOf, specHash } from '../../src/units.js';
import type { Assignment, Machine, UnitStatus } from '../../src/schemas/cluster.js';
import type { Store } from '../../src/store/store.js';
import { startAgent, type Agent, type AgentOptions } from '../../src/roles/agent/agent.js';
import { containerCreateOptions } from '../../src/roles/agent/container-spec.js';
import { chooseUnitPorts } from '../../src/roles/agent/ports.js';
import { startDockerd } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { waitFor } from '../harness/wait.js';

// The agent against a real dockerd, a real registry and a real store: assignments written as the
// scheduler would write them become running containers, and back.

const suffix = randomBytes(3).toString('hex');
const engine = await startDockerd();
t.teardown(() => engine.stop());
const registry = await startRegistry();
t.teardown(() => registry.stop());
const dataDir = mkdtempSync(join(tmpdir(), 'agent-test-store-'));
const store = await EmbeddedStore.open(dataDir);
t.teardown(async () => {
  await store.close();
  rmSync(dataDir, { recursive: true, force: true });
});

const repository = `agent-test/hello-${suffix}`;
const pinned = async (tag: string, options: Parameters<typeof buildTestImage>[4]) => {
  const image = await buildTestImage(engine.docker, registry.host, repository, tag, options);
  // The engine forgets the image, so the agent has to pull it from the registry.
  await engine.docker.getImage(image.reference).remove();
  return `${registry.host}/${repository}@${image.digest}`;
};
const imageV1 = await pinned('v1', { label: 'one' });
const imageV2 = await pinned('v2', { label: 'two' });
const crashImage = await pinned('crash', { variant: 'crash' });

const { docker } = engine;
const service = `web${suffix}`;
const unit = (instance: number) => `${service}-${instance}.service`;

function assignment(machine: string, instance: number, release: number, image: string, svc = service): Assignment {
  const env = { GREETING: `hello-${instance}` };
  return {
    unit: `${svc}-${instance}.service`,
    service: svc,
    instance,
    machine,
    release,
    spec: specHash({ image, env, ports: [] }),
    image,
    ports: [],
    env,
    stopGraceSeconds: 5,
    deployment: `d-${release}`,
    assignedAt: new Date().toISOString(),
  };
}

const assign = (a: Assignment) => store.put(assignmentKey(a.machine, slotOf(a)), JSON.stringify(a));
/** Deletes every assignment of the unit on the machine, as the scheduler does when it retires it. */
async function unassign(machine: string, name: string): Promise<void> {
  for (const kv of await store.list(assignmentPrefix(machine))) {
    if ((JSON.parse(kv.value) as Assignment).unit === name) await store.delete(kv.key);
  }
}
const readJson = async <T>(s: Store, key: string): Promise<T | undefined> => {
  const kv = await s.get(key);
  return kv ? (JSON.parse(kv.value) as T) : undefined;
};
const statusesOf = async (machine: string, name: string): Promise<UnitStatus[]> =>
  (await store.list(unitStatusPrefix(machine))).map((kv) => JSON.parse(kv.value) as UnitStatus).filter((status) => status.unit === name);
const statusOf = async (machine: string, name: string) => (await statusesOf(machine, name))[0];

async function runningStatus(machine: string, name: string, release: number): Promise<UnitStatus | undefined> {
  return (await statusesOf(machine, name)).find((status) => status.release === release && status.active === 'active' && status.sub === 'running');
}

async function httpGet(url: string): Promise<{ status: number; body: string; type: string | undefined }> {
  const response = await request(url);
  return { status: response.statusCode, body: await response.body.text(), type: response.headers['content-type'] as string | undefined };
}

const containersOf = (machine: string) =>
  docker.listContainers({ all: true, filters: { label: ['platform.managed=true', `platform.machine=${machine}`] } });

interface RunningAgent {
  agent: Agent;
  server: RoleServer;
  url: string;
  close(): Promise<void>;
}

async function runAgent(overrides: Partial<AgentOptions> & { machineId: string }): Promise<RunningAgent> {
  const port = await freePort();
  const started: { agent?: Agent } = {};
  const server = await createRoleServer({ role: 'agent', logger: false, access: { mode: 'none', listenerLoopback: true }, readiness: () => started.agent!.readiness() });
  const agent = await startAgent({
    store,
    server,
    address: `127.0.0.1:${port}`,
    network: 'host',
    dockerHost: engine.dockerHost,
    leaseTtlSeconds: 5,
    stopGraceSeconds: 5,
    drainSeconds: 1,
    resyncIntervalMs: 1_000,
    log: server.log,
    ...overrides,
  });
  started.agent = agent;
  await server.listen({ host: '127.0.0.1', port });
  return {
    agent,
    server,
    url: `http://127.0.0.1:${port}`,
    close: async () => {
      await agent.close();
      await server.close();
    },
  };
}

const machineId = `m-${suffix}`;
let main = await runAgent({ machineId, labels: { zone: 'test' } });
t.teardown(async () => {
  await main.close();
  for (const info of await containersOf(machineId)) await docker.getContainer(info.Id).remove({ force: true });
});

t.test('the agent registers its machine with a reachable Docker engine', async (t) => {
  const machine = await waitFor(() => readJson<Machine>(store, machineKey(machineId)), 10_000, { what: 'machine key' });
  t.equal(machine.id, machineId);
  t.equal(machine.address, main.url.replace('http://', ''));
  t.equal(machine.host, '127.0.0.1');
  t.equal(machine.network, 'host');
  t.same(machine.labels, { zone: 'test' });
  t.equal(machine.docker.reachable, true);
  t.match(machine.docker.version, /^\d+\./);
  t.ok(machine.capacity.units > 0);
  t.ok((await store.get(machineKey(machineId)))?.lease, 'the machine key lives under the agent lease');
  const ready = await httpGet(`${main.url}/readyz`);
  t.equal(ready.status, 200);
  t.match(JSON.parse(ready.body), { status: 'ready', machine: machineId, docker: machine.docker.version });
});

t.test('two assigned units run as containers named after them and answer on their addresses', async (t) => {
  await assign(assignment(machineId, 1, 1, imageV1));
  await assign(assignment(machineId, 2, 1, imageV1));
  for (const instance of [1, 2]) {
    const status = await waitFor(() => runningStatus(machineId, unit(instance), 1), 30_000, { what: `${unit(instance)} running` });
    t.equal(status.service, service);
    t.equal(status.instance, instance);
    t.equal(status.machine, machineId);
    t.equal(status.image, imageV1);
    t.match(status.address, /^127\.0\.0\.1:\d+$/);
    t.ok(status.containerId);
    const page = await httpGet(`http://${status.address}/`);
    t.equal(page.body.trim(), `${unit(instance)} hello-${instance} v1 one`, 'the unit answers with its name, env and release');
  }
  const names = (await containersOf(machineId)).map((info) => info.Names[0]).sort();
  t.same(names, [`/${unit(1)}`, `/${unit(2)}`]);
  const [info] = await containersOf(machineId);
  t.match(info!.Labels, { 'platform.managed': 'true', 'platform.machine': machineId, 'platform.service': service, 'platform.release': '1' });
  const machine = await waitFor(async () => {
    const record = await readJson<Machine>(store, machineKey(machineId));
    return record?.unitCount === 2 ? record : undefined;
  }, 10_000, { what: 'unit count 2' });
  t.equal(machine.unitCount, 2);
});

t.test('a unit runs unprivileged, without new privileges, host paths or host namespaces, and with at most 1024 processes', async (t) => {
  const status = (await runningStatus(machineId, unit(1), 1))!;
  const { HostConfig: host } = await docker.getContainer(status.containerId!).inspect();
  t.equal(host.Privileged, false);
  t.ok(host.SecurityOpt?.includes('no-new-privileges'), `SecurityOpt ${JSON.stringify(host.SecurityOpt)}`);
  t.same(host.CapDrop, ['ALL']);
  t.notOk(host.CapAdd?.some((cap: string) => ['SYS_ADMIN', 'NET_RAW', 'NET_ADMIN', 'SYS_PTRACE', 'MKNOD'].includes(cap)), 'no dangerous capability');
  t.notOk(host.Binds?.length, 'no host paths');
  t.notOk(host.Mounts?.length, 'no mounts');
  t.not(host.PidMode, 'host');
  t.not(host.IpcMode, 'host');
  t.equal(host.PidsLimit, 1024, 'a fork bomb stops at 1024 processes');
  t.equal((await httpGet(`http://${status.address}/`)).status, 200, 'and it serves');
});

t.test('assignments written into the store that ask for privileges are refused and say why', async (t) => {
  const asks: [number, Record<string, unknown>, string][] = [
    [6, { privileged: true }, 'privileged mode'],
    [7, { binds: ['/:/host'] }, 'host paths'],
    [8, { pidMode: 'host' }, "the host's PID namespace"],
  ];
  for (const [instance, extra] of asks) {
    const plain = assignment(machineId, instance, 1, imageV1);
    await store.put(assignmentKey(machineId, slotOf(plain)), JSON.stringify({ ...plain, ...extra }));
  }
  for (const [instance, , what] of asks) {
    const status = await waitFor(async () => {
      const s = await statusOf(machineId, unit(instance));
      return s?.active === 'failed' ? s : undefined;
    }, 30_000, { what: `${unit(instance)} refused` });
    t.equal(status.sub, 'failed');
    t.equal(status.errorKind, 'refused');
    t.equal(status.error, `assignment refused: it asks for ${what}, which no declaration can`);
    t.equal(status.containerId, undefined);
  }
  await main.agent.reconcile();
  const names = (await containersOf(machineId)).map((info) => info.Labels['platform.unit']);
  for (const [instance] of asks) t.notOk(names.includes(unit(instance)), `no container for ${unit(instance)}`);
  for (const [instance] of asks) await unassign(machineId, unit(instance));
  for (const [instance] of asks) await waitFor(async () => !(await statusOf(machineId, unit(instance))), 30_000, { what: `${unit(instance)} status gone` });
});

t.test('a running unit whose assignment is rewritten to ask for privileges is stopped, and says why', async (t) => {
  const plain = assignment(machineId, 9, 1, imageV1);
  await assign(plain);
  await waitFor(() => runningStatus(machineId, plain.unit, 1), 30_000, { what: `${plain.unit} running` });
  await store.put(assignmentKey(machineId, slotOf(plain)), JSON.stringify({ ...plain, privileged: true }));
  await waitFor(async () => !(await containersOf(machineId)).some((info) => info.Labels['platform.unit'] === plain.unit), 30_000, { what: 'its container removed' });
  const status = await waitFor(async () => {
    const s = await statusOf(machineId, plain.unit);
    return s?.errorKind === 'refused' ? s : undefined;
  }, 10_000, { what: 'refusal reported' });
  t.equal(status.active, 'failed');
  t.equal(status.error, 'assignment refused: it asks for privileged mode, which no declaration can');
  await unassign(machineId, plain.unit);
  await waitFor(async () => !(await statusOf(machineId, plain.unit)), 30_000, { what: `${plain.unit} status gone` });
});

t.test('GET /units lists this machine\'s unit statuses', async (t) => {
  const listed = await httpGet(`${main.url}/units`);
  t.equal(listed.status, 200);
  const statuses = JSON.parse(listed.body) as UnitStatus[];
  t.same(statuses.map((status) => status.unit), [unit(1), unit(2)]);
});

t.test('a new slot of a unit runs beside the old one; the old one drains, stops, and hands over the unit name', async (t) => {
  const before = (await runningStatus(machineId, unit(1), 1))!;
  await assign(assignment(machineId, 1, 2, imageV2));
  const after = await waitFor(() => runningStatus(machineId, unit(1), 2), 30_000, { what: 'release 2 running' });
  t.not(after.containerId, before.containerId, 'a new container');
  t.not(after.address, before.address, 'its own port while both run');
  t.equal(after.image, imageV2);
  t.equal((await httpGet(`http://${before.address}/`)).body.trim(), `${unit(1)} hello-1 v1 one`, 'the old one still serves');
  const page = await httpGet(`http://${after.address}/`);
  t.equal(page.body.trim(), `${unit(1)} hello-1 v2 two`);

  const old = assignment(machineId, 1, 1, imageV1);
  await store.delete(assignmentKey(machineId, slotOf(old)));
  const draining = await waitFor(async () => (await statusesOf(machineId, unit(1))).find((s) => s.release === 1 && s.active === 'deactivating'), 5_000, { what: 'old slot draining' });
  t.equal(draining.sub, 'running', 'draining: deactivating/running while in-flight requests finish');
  await waitFor(async () => (await statusesOf(machineId, unit(1))).length === 1, 30_000, { what: 'old status gone' });
  const forUnit = await waitFor(async () => {
    const named = (await containersOf(machineId)).filter((info) => info.Labels['platform.unit'] === unit(1));
    return named.length === 1 && named[0]!.Names[0] === `/${unit(1)}` ? named : undefined;
  }, 30_000, { what: 'the new container renamed to the unit name' });
  t.equal(forUnit[0]!.Labels['platform.release'], '2');
});

t.test('a killed container runs again and its restarts are counted', async (t) => {
  const before = (await runningStatus(machineId, unit(2), 1))!;
  await docker.getContainer(before.containerId!).kill();
  const after = await waitFor(async () => {
    const status = await runningStatus(machineId, unit(2), 1);
    return status && status.restarts >= 1 ? status : undefined;
  }, 30_000, { what: 'unit 2 restarted' });
  t.equal(after.containerId, before.containerId, 'the same container is started again');
  t.ok(after.restarts >= 1);
  t.equal((await httpGet(`http://${after.address}/`)).body.trim(), `${unit(2)} hello-2 v1 one`);
});

t.test('the logs route returns the container output', async (t) => {
  const logs = await httpGet(`${main.url}/units/${unit(2)}/logs?tail=100`);
  t.equal(logs.status, 200);
  t.match(logs.type, /^text\/plain/);
  t.match(logs.body, `serving ${unit(2)} on port`);
  t.notOk([...logs.body].some((char) => char.charCodeAt(0) < 9), 'Docker stream headers are removed');

  const unknown = await httpGet(`${main.url}/units/nothing-1.service/logs`);
  t.equal(unknown.status, 404);
  t.match(JSON.parse(unknown.body), { statusCode: 404, message: /nothing-1\.service/ });
  const invalid = await httpGet(`${main.url}/units/Not_A_Unit/logs`);
  t.equal(invalid.status, 400);
});

t.test('a following log request streams until the client disconnects', async (t) => {
  const controller = new AbortController();
  const response = await request(`${main.url}/units/${unit(2)}/logs?tail=10&follow=true`, { signal: controller.signal });
  t.equal(response.statusCode, 200);
  let received = '';
  for await (const chunk of response.body) {
    received += chunk.toString();
    if (received.includes('serving')) break;
  }
  controller.abort();
  t.match(received, `serving ${unit(2)}`);
});

t.test('a unit that crashes at once is restarted with backoff and reported failed', async (t) => {
  const crashing = assignment(machineId, 3, 1, crashImage);
  await assign(crashing);
  const status = await waitFor(async () => {
    const s = await statusOf(machineId, crashing.unit);
    return s && s.active === 'failed' && s.restarts >= 1 ? s : undefined;
  }, 30_000, { what: 'crash-looping unit failed' });
  t.equal(status.sub, 'auto-restart');
  t.match(status.error, 'exited with code 1');
  t.equal(status.errorKind, 'crash-loop');
  await unassign(machineId, crashing.unit);
  await waitFor(async () => !(await statusOf(machineId, crashing.unit)), 30_000, { what: 'crash unit status gone' });
});

t.test('an image the registry does not have fails the unit with the pull error', async (t) => {
  const missing = assignment(machineId, 4, 1, `${registry.host}/${repository}@sha256:${'0'.repeat(64)}`);
  await assign(missing);
  const status = await waitFor(async () => {
    const s = await statusOf(machineId, missing.unit);
    return s?.active === 'failed' ? s : undefined;
  }, 30_000, { what: 'pull failure reported' });
  t.match(status.error, /^image pull failed: /);
  t.equal(status.errorKind, 'image-pull');
  t.equal(status.sub, 'auto-restart', 'the pull is retried with backoff');
  await unassign(machineId, missing.unit);
  await waitFor(async () => !(await statusOf(machineId, missing.unit)), 30_000, { what: 'missing-image unit status gone' });
});

t.test("a unit whose container cannot start says why, without the machine's paths (L7)", async (t) => {
  const { DockerRootDir } = (await docker.info()) as { DockerRootDir: string };
  // A volume over a file of the image: the engine's error names the volume's directory under its data root.
  const mounted: Assignment = { ...assignment(machineId, 21, 1, imageV1), volumes: [{ name: 'bin', path: '/bin/busybox' }] };
  await assign(mounted);
  const status = await waitFor(async () => {
    const s = await statusOf(machineId, mounted.unit);
    return s?.errorKind === 'container-start' ? s : undefined;
  }, 30_000, { what: 'the start failure reported' });
  t.match(status.error, /^container failed to start: .*<host path>/, String(status.error));
  t.notOk(status.error!.includes(DockerRootDir), `the status does not name the data root (${DockerRootDir})`);
  t.notOk(status.error!.includes('/var/lib/docker'), 'nor the default one');
  await unassign(machineId, mounted.unit);
  await waitFor(async () => !(await statusOf(machineId, mounted.unit)), 30_000, { what: 'the unit status gone' });
});

t.test('a unit whose health check does not answer 2xx waits in activating and says for what', async (t) => {
  const unhealthy = { ...assignment(machineId, 5, 1, imageV1), healthCheck: { path: '/missing' } };
  await assign(unhealthy);
  const status = await waitFor(async () => {
    const s = await statusOf(machineId, unhealthy.unit);
    return s?.error ? s : undefined;
  }, 30_000, { what: 'health-check wait reported' });
  t.equal(status.active, 'activating');
  t.equal(status.error, 'waiting for GET /missing to answer 2xx');
  t.equal(status.errorKind, 'health-check');
  t.equal(status.restarts, 0, 'a wait is not a failure');
  await unassign(machineId, unhealthy.unit);
  await waitFor(async () => !(await statusOf(machineId, unhealthy.unit)), 30_000, { what: 'unhealthy unit status gone' });
});

t.test('removing an assignment stops and removes the container and withdraws its status', async (t) => {
  const started = Date.now();
  await unassign(machineId, unit(2));
  await waitFor(async () => !(await statusOf(machineId, unit(2))), 30_000, { what: 'status key gone' });
  // Drain 1 s, then a grace period of 5 s: a quicker removal shows the unit stopped on SIGTERM.
  t.ok(Date.now() - started < 5_000, `stopped within the grace period (${Date.now() - started} ms)`);
  const names = (await containersOf(machineId)).map((info) => info.Names[0]);
  t.same(names, [`/${unit(1)}`]);
});

t.test('an image removed from the engine after its check passed is pulled again for the next unit', async (t) => {
  // The agent trusts a passed image check for minutes; a create refused for a missing image must end that trust.
  const first = assignment(machineId, 12, 1, imageV2);
  await assign(first);
  await waitFor(() => runningStatus(machineId, first.unit, 1), 30_000, { what: `${first.unit} running` });
  await unassign(machineId, first.unit);
  await waitFor(async () => !(await containersOf(machineId)).some((info) => info.Labels['platform.unit'] === first.unit), 30_000, { what: 'its container removed' });
  await docker.getImage(imageV2).remove({ force: true });
  const second = assignment(machineId, 13, 1, imageV2);
  await assign(second);
  t.ok(await waitFor(() => runningStatus(machineId, second.unit, 1), 8_000, { what: `${second.unit} running on the pulled image` }), 'the next unit runs on the pulled image');
  await unassign(machineId, second.unit);
  await waitFor(async () => !(await statusOf(machineId, second.unit)), 30_000, { what: `${second.unit} status gone` });
});

t.test('close() leaves the machine to its lease TTL (issue 28, restarts keep units); units keep running and a new agent adopts them', async (t) => {
  const before = (await runningStatus(machineId, unit(1), 2))!;
  const lease = (await store.get(machineKey(machineId)))?.lease;
  await main.close();
  t.ok(await store.get(machineKey(machineId)), 'the machine key stays: a restart within the TTL moves nothing');
  t.equal((await statusesOf(machineId, unit(1))).length, 1, 'and so does the status: gateways keep routing to the unit');
  t.equal((await httpGet(`http://${before.address}/`)).status, 200, 'the unit still answers');

  main = await runAgent({ machineId, labels: { zone: 'test' } });
  const adopted = await waitFor(async () => {
    const machine = await store.get(machineKey(machineId));
    return machine && machine.lease !== lease ? runningStatus(machineId, unit(1), 2) : undefined;
  }, 30_000, { what: "unit adopted, the machine under the new agent's lease" });
  t.equal(adopted.containerId, before.containerId, 'the running container is adopted, not replaced');
  t.equal(adopted.address, before.address);
});

t.test('agents sharing one engine keep to their own containers', async (t) => {
  const neighbourId = `m-neighbour-${suffix}`;
  const neighbour = await runAgent({ machineId: neighbourId });
  t.teardown(async () => {
    await neighbour.close();
    for (const info of await containersOf(neighbourId)) await docker.getContainer(info.Id).remove({ force: true });
  });
  // The same unit name on two machines: the neighbour cannot take the name, nor touch ours.
  await assign(assignment(neighbourId, 1, 7, imageV1));
  const theirs = await waitFor(() => runningStatus(neighbourId, unit(1), 7), 30_000, { what: 'neighbour unit running' });
  const ours = (await runningStatus(machineId, unit(1), 2))!;
  t.not(theirs.containerId, ours.containerId);
  const theirName = (await containersOf(neighbourId)).map((info) => info.Names[0]);
  t.same(theirName, [`/${unit(1)}.${assignment(neighbourId, 1, 7, imageV1).spec}.${neighbourId}`], 'the name is held: a longer one');
  t.equal((await httpGet(`http://${theirs.address}/`)).body.trim(), `${unit(1)} hello-1 v7 one`);
  await unassign(neighbourId, unit(1));
  await waitFor(async () => (await containersOf(neighbourId)).length === 0, 30_000, { what: 'neighbour container removed' });
  t.ok(await runningStatus(machineId, unit(1), 2), 'our unit is untouched');
});

t.test('an agent without a Docker engine says why and fails its units', async (t) => {
  const socket = `/tmp/pd-missing-${suffix}/docker.sock`;
  const lonelyId = `m-nodocker-${suffix}`;
  const lonely = await runAgent({ machineId: lonelyId, dockerHost: `unix://${socket}` });
  t.teardown(() => lonely.close());
  const machine = await waitFor(() => readJson<Machine>(store, machineKey(lonelyId)), 10_000, { what: 'machine key' });
  t.equal(machine.docker.reachable, false);
  t.match(machine.docker.error, `ENOENT ${socket}`);

  const stranded = assignment(lonelyId, 1, 1, imageV1, `lonely${suffix}`);
  await assign(stranded);
  const status = await waitFor(async () => {
    const s = await statusOf(lonelyId, stranded.unit);
    return s?.active === 'failed' ? s : undefined;
  }, 10_000, { what: 'unit failed' });
  t.equal(status.sub, 'failed');
  t.match(status.error, /^Docker engine unreachable: .*ENOENT/);
  t.equal(status.errorKind, 'engine-unreachable');

  const ready = await httpGet(`${lonely.url}/readyz`);
  t.equal(ready.status, 503);
  t.match(JSON.parse(ready.body).message, `no Docker engine reachable at unix://${socket}`);
  t.match(JSON.parse(ready.body).message, /units cannot start on this machine until one is\. Start Docker .*DOCKER_HOST/, '/readyz says what to do');

  await lonely.close();
  await waitFor(async () => (await store.get(machineKey(lonelyId))) === undefined, 15_000, { what: 'the machine key gone with its lease' });
  await unassign(lonelyId, stranded.unit);
});

t.test('a bridge-mode agent on an engine without a bridge network says, while its unit waits for a published port, to use --network host', async (t) => {
  const bridgeless = await runAgent({ machineId: `m-nobridge-${suffix}`, network: 'bridge' });
  const waiting = assignment(`m-nobridge-${suffix}`, 1, 1, imageV1, `nobridge${suffix}`);
  t.teardown(async () => {
    await unassign(waiting.machine, waiting.unit);
    await bridgeless.close();
    for (const info of await containersOf(waiting.machine)) await docker.getContainer(info.Id).remove({ force: true });
  });
  await assign(waiting);
  const status = await waitFor(async () => (await statusOf(waiting.machine, waiting.unit))?.errorKind === 'port-publish' && statusOf(waiting.machine, waiting.unit), 60_000, {
    what: 'the unit waiting for a published port',
  });
  t.match(status, { active: 'activating', sub: 'start-pre', error: /^waiting for Docker to publish the unit port \(an engine without a bridge network never does: --network host\)$/ });
});

// The test engine runs without a bridge network, so bridge mode is checked on the container spec.
t.test('in bridge mode the unit listens on its container port and Docker publishes it', async (t) => {
  const ephemeral = assignment('m-bridge', 1, 3, imageV1);
  const ports = await chooseUnitPorts(ephemeral, 'bridge', new Set());
  t.same(ports, { port: 8080 });
  const spec = containerCreateOptions({ assignment: ephemeral, machineId: 'm-bridge', network: 'bridge', ...ports });
  t.same(spec.HostConfig?.PortBindings, { '8080/tcp': [{ HostIp: '', HostPort: '' }] });
  t.same(spec.ExposedPorts, { '8080/tcp': {} });
  t.ok(spec.Env?.includes('PORT=8080'));
  t.ok(spec.Env?.includes('PLATFORM_RELEASE=v3'));

  const fixed = { ...ephemeral, ports: [{ container: 5000, host: 15000 }] };
  const fixedPorts = await chooseUnitPorts(fixed, 'bridge', new Set());
  t.same(fixedPorts, { port: 5000, hostPort: 15000 });
  t.same(containerCreateOptions({ assignment: fixed, machineId: 'm-bridge', network: 'bridge', ...fixedPorts }).HostConfig?.PortBindings, {
    '5000/tcp': [{ HostIp: '', HostPort: '15000' }],
  });
  t.same(await chooseUnitPorts(fixed, 'host', new Set()), { port: 15000 }, 'host mode uses the fixed host port');
});
