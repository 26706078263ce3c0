import t from 'tap';
import { randomBytes } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { startEtcd } from '../harness/etcd.js';
import { startDockerd } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { http, serveRole } from '../harness/platform.js';
import { gatewayRoutes, startGateway } from '../harness/gateway-cluster.js';
import { waitFor } from '../harness/wait.js';
import { clusterUnits } from '../harness/cluster-units.js';
import { sampleAssignment } from '../harness/assignment.js';
import { openStore } from '../../src/store/open-store.js';
import { assignmentKey, unitStatusKey } from '../../src/store/keys.js';
import { slotOf } from '../../src/units.js';
import type { Assignment } from '../../src/schemas/cluster.js';

// What a unit may not take of its machine, on real parts (etcd, Docker, a registry, an agent on
// host networking, a gateway running HAProxy): the platform's ports, by binding beside a
// listener or by asking for one as its host port, and root on the host's network.

const etcd = await startEtcd();
const registry = await startRegistry();
const engine = await startDockerd();
const repository = `ports/app-${randomBytes(3).toString('hex')}`;
const image = await buildTestImage(engine.docker, registry.host, repository, 'ok');
const flags = ['--etcd', etcd.url];
const agentPort = await freePort();
const roles = [
  await serveRole('agent', agentPort, [...flags, '--network', 'host', '--machine-id', 'm1', '--stop-grace', '1', '--drain-seconds', '0'], { DOCKER_HOST: engine.dockerHost }),
  await serveRole('directory', await freePort(), flags),
  await serveRole('scheduler', await freePort(), flags),
];
const orchestrator = await serveRole('orchestrator', await freePort(), flags);
const gateway = await startGateway('haproxy', flags);
const store = await openStore({ etcd: [etcd.url], dataDir: '' });
t.teardown(async () => {
  await store.close();
  await Promise.all([...roles, orchestrator, gateway].map((role) => role.stop()));
  await Promise.all([registry.stop(), etcd.stop()]);
  await engine.stop();
});

const orch = (path: string) => `${orchestrator.url}${path}`;
const { settled, finished } = clusterUnits(orchestrator.url);

// A root process in the host's network namespace, as a unit on host networking was, binding with
// SO_REUSEPORT (Node 20 cannot set it; Python can): the kernel shares a port among such sockets.
const reusePortBind = `
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
try:
    s.bind(('127.0.0.1', int(sys.argv[1])))
    s.listen()
    print('bound')
except OSError as error:
    print('refused', error.strerror)
`;

const bindBeside = (port: number): string => {
  const result = spawnSync('python3', ['-c', reusePortBind, String(port)], { encoding: 'utf8' });
  return `${result.stdout}${result.stderr}`.trim();
};

/** Writes an assignment for m1 as whoever can write the store could, and waits for the agent's report on it. */
async function assignDirectly(fields: Partial<Assignment>): Promise<{ errorKind?: string; error?: string }> {
  const { healthCheck: _none, ...assignment } = sampleAssignment({ image: image.reference, ...fields });
  await store.put(assignmentKey('m1', slotOf(assignment)), JSON.stringify(assignment));
  return waitFor(async () => {
    const found = await store.get(unitStatusKey('m1', slotOf(assignment)));
    return found ? (JSON.parse(found.value) as { errorKind?: string; error?: string }) : undefined;
  }, 20_000, { what: `the agent's report on ${assignment.unit}` });
}

t.test('a root process on the host cannot bind the gateway\'s port beside HAProxy', async (t) => {
  t.equal(bindBeside(gateway.port), 'refused Address already in use');
});

t.test('nor beside the Node data plane, whose listener never shares its port', async (t) => {
  // Not announced: the HAProxy gateway's announcement is the one later tests need.
  const nodePlane = await startGateway('node', [...flags, '--no-announce']);
  t.teardown(() => nodePlane.stop());
  t.equal(bindBeside(nodePlane.port), 'refused Address already in use');
});

t.test('a declaration asking for a platform port as its host port gets 400 naming the field and the rule, and nothing is stored', async (t) => {
  const reply = await http('POST', orch('/services'), { name: 'grabber', containerRepository: `${registry.host}/${repository}`, ports: [{ container: 80, host: 8080 }] });
  t.equal(reply.status, 400);
  t.equal(reply.body.message, 'ports.0.host must be an integer from 1 to 65535 that is no platform port (2379, 2380, 4001, 7001, 8080, 8081, 8443, 9000, 9001, 9002, 9003, 9004)');
  t.equal((await http('GET', orch('/services/grabber'))).status, 404, 'nothing declared');
});

t.test('a unit on host networking runs as nobody, not as root', async (t) => {
  t.equal((await http('POST', orch('/services'), { name: 'plain', containerRepository: `${registry.host}/${repository}` })).status, 201);
  const deployed = await http('POST', orch('/services/plain/deploy'), { containerRepository: image.reference });
  t.equal((await finished(deployed.body.deployment)).state, 'succeeded');
  await settled('plain', 1);
  const [container] = await engine.docker.listContainers({ filters: { label: ['platform.service=plain'] } });
  const inspected = await engine.docker.getContainer(container!.Id).inspect();
  t.equal(inspected.Config.User, '65534:65534');
  const status = readFileSync(`/proc/${inspected.State.Pid}/status`, 'utf8');
  t.match(status, /^Uid:\s+65534\s+65534\s+65534\s+65534$/m, 'its process runs as uid 65534');
});

t.test('the agent refuses an assignment whose host port is one its machine\'s platform roles listen on', async (t) => {
  const refused = await assignDirectly({ unit: 'sneaky-1.service', service: 'sneaky', ports: [{ container: 80, host: agentPort }] });
  t.equal(refused.errorKind, 'refused');
  t.equal(refused.error, `assignment refused: host port ${agentPort} is one the platform listens on`);
  t.same(await engine.docker.listContainers({ all: true, filters: { label: ['platform.service=sneaky'] } }), [], 'no container made');
});

t.test('a gateway on a port of its own: a deploy asking for it as a host port fails naming it, and an agent refuses it', async (t) => {
  const ports = [{ container: gateway.port, host: gateway.port }];
  t.equal((await http('POST', orch('/services'), { name: 'squatter', containerRepository: `${registry.host}/${repository}`, ports })).status, 201);
  const deployed = await http('POST', orch('/services/squatter/deploy'), { containerRepository: image.reference });
  const outcome = await finished(deployed.body.deployment);
  t.equal(outcome.state, 'failed');
  t.equal(outcome.reason, `squatter asks for host port ${gateway.port}, which the platform listens on; no unit may bind it`);

  const refused = await assignDirectly({ unit: 'squatter-9.service', service: 'squatter', instance: 9, ports });
  t.equal(refused.error, `assignment refused: host port ${gateway.port} is one the platform listens on`);
  t.same(await engine.docker.listContainers({ all: true, filters: { label: ['platform.service=squatter'] } }), [], 'no container made');
});

// Issue 31 item 3 (no self-loops). Status records written as whoever can write the store could:
// an agent fooled (or an old one) reports a unit at an address where the platform itself listens.
t.test('a gateway leaves out of its routes a unit address on this machine where the gateway or another role listens, on either data plane', async (t) => {
  t.equal((await http('POST', orch('/services'), { name: 'loop', containerRepository: `${registry.host}/${repository}` })).status, 201);
  const nodePlane = await startGateway('node', [...flags, '--no-announce']);
  t.teardown(() => nodePlane.stop());
  // A real upstream beside them, so the statuses demonstrably reach the gateways.
  const upstream = createServer((_req, res) => res.end('the real unit'));
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => upstream.close(() => resolve())));
  const upstreamPort = (upstream.address() as AddressInfo).port;
  // The HAProxy gateway's own port, the Node one's, a platform port, an announced role's (the orchestrator's).
  const orchestratorPort = new URL(orchestrator.url).port;
  // Written last, the real unit: once a gateway routes it, it has seen the others (a watch delivers in order).
  const addresses = [`127.0.0.1:${gateway.port}`, `127.0.0.1:9003`, `127.0.0.1:${orchestratorPort}`, `localhost:${nodePlane.port}`, `127.0.0.1:${upstreamPort}`];
  for (const [i, address] of addresses.entries()) {
    const slot = { unit: `loop-${i + 1}.service`, service: 'loop', instance: i + 1, machine: 'elsewhere', release: 1, spec: 'loopspec' };
    const status = { ...slot, image: image.reference, active: 'active', sub: 'running', address, restarts: 0, updatedAt: new Date().toISOString() };
    await store.put(unitStatusKey('elsewhere', slotOf(slot)), JSON.stringify(status));
  }
  // The Node gateway is not announced (--no-announce): to the HAProxy one it is an address like any
  // other, routed, where the Node gateway answers by routing to the real unit alone.
  const expected = { haproxy: [`127.0.0.1:${upstreamPort}`, `localhost:${nodePlane.port}`], node: [`127.0.0.1:${upstreamPort}`] };
  for (const plane of [gateway, nodePlane]) {
    const routes = await waitFor(async () => {
      const found = (await gatewayRoutes(plane)).find((route) => route.name === 'loop');
      const routed = new Set(found?.upstreams.map((upstream) => upstream.address));
      return expected[plane.plane].every((address) => routed.has(address)) ? found : undefined;
    }, 20_000, { what: `the ${plane.plane} gateway's route for loop` });
    t.same(routes.upstreams.map((upstream) => upstream.address).sort(), expected[plane.plane].sort(), `${plane.plane}: no address where it or another role listens is routed`);
    for (let i = 0; i < 4; i++) {
      const reply = await request(`http://127.0.0.1:${plane.port}/`, { headers: { host: 'loop.platform.internal' }, headersTimeout: 5_000, bodyTimeout: 5_000 });
      t.equal(await reply.body.text(), 'the real unit', `${plane.plane}: request ${i + 1} reaches the real unit`);
    }
  }
});

t.test('a unit whose host port another process holds never becomes running, and no gateway routes to that process', async (t) => {
  const impostor = createServer((_req, res) => res.end('an impostor'));
  await new Promise<void>((resolve) => impostor.listen(0, '0.0.0.0', resolve));
  t.teardown(() => new Promise<void>((resolve) => impostor.close(() => resolve())));
  const held = (impostor.address() as AddressInfo).port;
  const declared = await http('POST', orch('/services'), { name: 'held', containerRepository: `${registry.host}/${repository}`, ports: [{ container: held, host: held }] });
  t.equal(declared.status, 201);
  let seenRunning = false;
  let watching = true;
  const watcher = (async () => {
    while (watching) {
      const units = (await http('GET', orch('/services/held/units'))).body as { active: string; sub: string }[];
      if (units.some((unit) => unit.active === 'active' && unit.sub === 'running')) seenRunning = true;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  })();
  const deployed = await http('POST', orch('/services/held/deploy'), { containerRepository: image.reference });
  const outcome = await finished(deployed.body.deployment);
  watching = false;
  await watcher;
  t.equal(outcome.state, 'failed', `the deployment fails (${outcome.reason})`);
  t.notOk(seenRunning, 'the unit was never reported running');
  const route = (await gatewayRoutes(gateway)).find((entry) => entry.name === 'held');
  t.same(route?.upstreams ?? [], [], 'the gateway routes nothing to the impostor');
});

t.test('an adopted unit whose own process stopped listening while another answers on its port stops counting as running after an agent restart', async (t) => {
  // A unit that goes on running when its server dies: the chatty variant's shell loop outlives httpd.
  const lingering = await buildTestImage(engine.docker, registry.host, `${repository}-lingering`, 'lingering', { variant: 'chatty' });
  t.equal((await http('POST', orch('/services'), { name: 'adoptee', containerRepository: `${registry.host}/${repository}-lingering` })).status, 201);
  t.teardown(() => http('DELETE', orch('/services/adoptee')));
  const deployed = await http('POST', orch('/services/adoptee/deploy'), { containerRepository: lingering.reference });
  t.equal((await finished(deployed.body.deployment)).state, 'succeeded');
  const [unit] = await settled('adoptee', 1);
  const port = Number(unit!.address!.split(':').at(-1));
  const [container] = await engine.docker.listContainers({ filters: { label: ['platform.service=adoptee'] } });

  // While the agent is down, the unit's server dies and another process takes its port.
  await roles[0]!.stop();
  const exec = await engine.docker.getContainer(container!.Id).exec({ Cmd: ['kill', '-9', '-1'] });
  await exec.start({ hijack: true, stdin: false }).then((stream) => new Promise((resolve) => (stream.on('end', resolve), stream.resume())));
  const impostor = createServer((_req, res) => res.end('an impostor'));
  await waitFor(() => new Promise<boolean>((resolve) => impostor.once('error', () => resolve(false)).listen(port, '0.0.0.0', () => resolve(true))), 10_000, { what: `port ${port} to be free` });
  t.teardown(() => new Promise<void>((resolve) => impostor.close(() => resolve())));
  roles[0] = await serveRole('agent', agentPort, [...flags, '--network', 'host', '--machine-id', 'm1', '--stop-grace', '1', '--drain-seconds', '0'], { DOCKER_HOST: engine.dockerHost });

  const still = await engine.docker.getContainer(container!.Id).inspect();
  t.ok(still.State.Running, 'the container still runs: the agent adopts it');
  const seen = await waitFor(
    async () => {
      const [now] = (await http('GET', orch('/services/adoptee/units'))).body as { active: string; sub: string; error?: string }[];
      return now && now.sub !== 'running' && now.error ? now : undefined;
    },
    30_000,
    { what: 'the adopted unit to stop counting as running' },
  );
  t.match(seen.error, /another process answers at .*: waiting for the unit's own container to listen there/);
  await waitFor(async () => ((await gatewayRoutes(gateway)).find((entry) => entry.name === 'adoptee')?.upstreams.length ?? 0) === 0, 20_000, {
    what: 'the gateway to route nothing to the impostor',
  });
});
