import t from 'tap';
import { request } from 'undici';
import { startTestHosts, type HostProcess, type TestHost } from '../harness/test-hosts.js';
import { freePort } from '../harness/free-port.js';
import { http, serveRole } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';
import { hostServices, type HostUnit } from '../harness/host-services.js';
import { startLoad } from '../harness/http-load.js';

// Four test hosts (network namespaces on a test bridge, each with its own address and dockerd):
// three run agents with bridge networking, the fourth a gateway that reaches units by their
// hosts' addresses. The directory, scheduler and orchestrator run outside the hosts, on the
// bridge. Default lease TTL (10 s) throughout: the partition must heal within 15 s as shipped; the
// engine grace period is shortened to 5 s.

const cluster = await startTestHosts({ count: 4, agents: 3 });
const [h1, h2, h3, h4] = cluster.hosts as [TestHost, TestHost, TestHost, TestHost];
const directory = await serveRole('directory', await freePort(), cluster.flags, cluster.env);
const ENGINE_GRACE = 5;
const scheduler = await serveRole('scheduler', await freePort(), [...cluster.flags, '--engine-grace', String(ENGINE_GRACE)], cluster.env);
const orchestrator = await serveRole('orchestrator', await freePort(), cluster.flags, cluster.env);
// The gateway listens on every address of its host, so the internal domain has its own listener
// (docs/gateway.md): on the host's address here, the next port up.
const gateway: HostProcess = await h4.serve('gateway', ['--internal-host', h4.address]);
const internalUrl = `http://${h4.address}:${Number(new URL(gateway.url).port) + 1}`;
t.teardown(async () => {
  await Promise.all([gateway, orchestrator, scheduler, directory].map((role) => role.stop()));
  await cluster.stop();
});

// Calls from the bridge address are not local: the gateway's /routes on a test host needs a token.
const bootstrap = await http('POST', `${orchestrator.url}/tokens/bootstrap`);
if (bootstrap.status !== 200 && bootstrap.status !== 201) throw new Error(`token bootstrap: ${JSON.stringify(bootstrap.body)}`);
const bearer = { authorization: `Bearer ${bootstrap.body.secret as string}` };

const agentHosts = [h1, h2, h3];
const orch = (path: string) => `${orchestrator.url}${path}`;
const { declareAndDeploy, settled } = hostServices(orchestrator.url, cluster);
type Unit = HostUnit;
const hostOf = (machine: string) => cluster.hosts.find((host) => host.name === machine)!;
const containersOn = async (host: TestHost, service: string) =>
  host.engine.docker.listContainers({ filters: { label: [`platform.service=${service}`] } });
const routes = async (service: string): Promise<{ address: string; unit: string }[]> => {
  const reply = await http('GET', `${gateway.url}/routes`, undefined, bearer);
  if (reply.status !== 200) throw new Error(`GET /routes answered ${reply.status}: ${JSON.stringify(reply.body)}`);
  const table = (reply.body as { routes: { name: string; upstreams: { address: string; unit: string }[] }[] }).routes;
  return table.find((route) => route.name === service)?.upstreams ?? [];
};

const perMachine = (units: Unit[]) => Object.fromEntries(agentHosts.map((host) => [host.name, units.filter((u) => u.machine === host.name).length]));

t.test('three hosts register with their own addresses and engines', async (t) => {
  const machines = await waitFor(async () => {
    const listed = (await http('GET', orch('/cluster/machines'))).body as { id: string; host: string; network: string; docker: { reachable: boolean } }[];
    return listed.length === 3 ? listed : undefined;
  }, 30_000, { what: 'three machines' });
  for (const host of agentHosts) {
    t.match(machines.find((m) => m.id === host.name), { host: host.address, network: 'bridge', docker: { reachable: true } }, `${host.name} at ${host.address}`);
  }
});

t.test('a self-conflicting service goes one unit per host', async (t) => {
  await declareAndDeploy('solo', 3, 'solo');
  t.same(perMachine(await settled('solo', 3)), { [h1.name]: 1, [h2.name]: 1, [h3.name]: 1 });
  t.equal((await http('DELETE', orch('/services/solo'))).status, 204);
});

t.test('6 units spread 2 per host; the gateway on a fourth host reaches all 6 by their hosts addresses', async (t) => {
  await declareAndDeploy('spread', 6);
  const units = await settled('spread', 6);
  t.same(perMachine(units), { [h1.name]: 2, [h2.name]: 2, [h3.name]: 2 });
  for (const unit of units) t.match(unit.address, new RegExp(`^${hostOf(unit.machine).address.replaceAll('.', '\\.')}:\\d+$`), `${unit.unit} at its host's address`);
  await waitFor(async () => (await routes('spread')).length === 6, 30_000, { what: 'six routes' });
  // Sequential requests visit every unit in turn (round robin when idle).
  const seen = new Set<string>();
  for (let i = 0; i < 24 && seen.size < 6; i++) {
    const response = await request(`${internalUrl}/`, { headers: { host: 'spread.platform.internal' }, headersTimeout: 10_000 });
    const text = await response.body.text();
    t.equal(response.statusCode, 200, text.slice(0, 200));
    seen.add(text.split(' ')[0]!);
  }
  t.same([...seen].sort(), units.map((u) => u.unit).sort(), 'every unit answered through the gateway');
});

/** Samples the gateway's routes until stopped: the most addresses any one unit was routed to at once. */
function sampleRoutes(service: string): { stop(): Promise<{ most: number; twice: string[] }> } {
  let sampling = true;
  let most = 0;
  const twice = new Set<string>();
  const loop = (async () => {
    while (sampling) {
      const upstreams = await routes(service).catch(() => []);
      for (const unit of new Set(upstreams.map((u) => u.unit))) {
        const count = upstreams.filter((u) => u.unit === unit).length;
        most = Math.max(most, count);
        if (count > 1) twice.add(`${unit} at ${upstreams.filter((u) => u.unit === unit).map((u) => u.address).join(' and ')}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  })();
  return {
    stop: async () => {
      sampling = false;
      await loop;
      return { most, twice: [...twice] };
    },
  };
}

t.test('a partitioned host: its units run elsewhere within 15 s and the gateway stops sending to it; healed, it stops the units that moved', async (t) => {
  const victim = h3;
  await settled('spread', 6);
  const load = startLoad({ url: `${internalUrl}/`, host: 'spread.platform.internal', concurrency: 4, maxDurationMs: 120_000 });
  await waitFor(() => load.progress.ok >= 20, 20_000, { what: 'load through the gateway' });
  victim.partition();
  const partitionedAt = Date.now();
  const moved = await settled('spread', 6, victim.name);
  const seconds = (Date.now() - partitionedAt) / 1000;
  t.ok(seconds <= 15, `units of ${victim.name} running elsewhere ${seconds.toFixed(1)} s after the partition (default lease TTL)`);
  t.same(perMachine(moved), { [h1.name]: 3, [h2.name]: 3, [h3.name]: 0 });
  await waitFor(async () => (await routes('spread')).every((u) => !u.address.startsWith(`${victim.address}:`)), 15_000, { what: `the gateway to stop routing to ${victim.address}` });
  // Once the routes say so, nothing sent fails: a few more seconds of load all succeed. A request
  // sent to the partitioned host before may still fail after this (HAProxy tries its connection
  // for 5 s, then once more elsewhere): it is one of those in flight, counted below.
  const droppedAt = Date.now();
  const okBefore = load.progress.ok;
  await waitFor(() => load.progress.ok >= okBefore + 40, 20_000, { what: 'load after the move' });
  const failedSinceDrop = load.failedSentSince(droppedAt);
  const result = await load.stop();
  t.equal(failedSinceDrop, 0, 'no request sent after the gateway dropped the host failed');
  t.ok(result.failed <= 4, `at most the 4 requests in flight on the host failed (${result.failed}: ${result.failures.join('; ')})`);

  const sampler = sampleRoutes('spread');
  victim.heal();
  await waitFor(async () => (await http('GET', orch('/cluster/machines'))).body.some((m: { id: string }) => m.id === victim.name), 30_000, { what: `${victim.name} back` });
  await waitFor(async () => (await containersOn(victim, 'spread')).length === 0, 30_000, { what: `the moved units stopped on ${victim.name}` });
  await new Promise((resolve) => setTimeout(resolve, 2000));
  const { most, twice } = await sampler.stop();
  t.equal(most, 1, `no unit was routed twice after the heal${twice.length ? `: ${twice.join('; ')}` : ''}`);
  t.same(perMachine(await settled('spread', 6)), { [h1.name]: 3, [h2.name]: 3, [h3.name]: 0 }, 'the units stay where they moved');
  const running = (await Promise.all(agentHosts.map((host) => containersOn(host, 'spread')))).flat();
  t.equal(running.length, 6, 'six containers in all: no unit runs twice');
});

t.test('a host whose dockerd is stopped past the grace period: its units move, it is reported without an engine, and they do not come back', async (t) => {
  const victim = h1;
  const before = await settled('spread', 6);
  t.ok(before.some((u) => u.machine === victim.name), `${victim.name} runs units`);
  await victim.engine.pause();
  const stoppedAt = Date.now();
  const record = await waitFor(async () => {
    const machines = (await http('GET', orch('/cluster/machines'))).body as { id: string; docker: { reachable: boolean; unreachableSince?: string } }[];
    const machine = machines.find((m) => m.id === victim.name);
    return machine && !machine.docker.reachable ? machine : undefined;
  }, 20_000, { what: `${victim.name} reported without an engine` });
  t.match(record.docker, { reachable: false, unreachableSince: String }, 'the machine record says since when it has no engine');
  const moved = await settled('spread', 6, victim.name);
  const seconds = (Date.now() - stoppedAt) / 1000;
  t.ok(seconds >= ENGINE_GRACE, `not moved within the grace period (${seconds.toFixed(1)} s)`);
  // The agent notices within its 5 s resync; the leader heals when the grace period ends.
  t.ok(seconds <= ENGINE_GRACE + 15, `moved ${seconds.toFixed(1)} s after dockerd stopped (grace ${ENGINE_GRACE} s)`);
  const journal = (await http('GET', orch('/journal?service=spread'))).body as { kind: string; message: string }[];
  t.ok(journal.some((entry) => entry.kind === 'service.rescheduled' && entry.message.includes('no Docker engine') && entry.message.includes(`off ${victim.name}`)), 'the journal says why');

  await victim.engine.resume();
  await waitFor(async () => (await http('GET', orch('/cluster/machines'))).body.find((m: { id: string }) => m.id === victim.name)?.docker.reachable, 30_000, { what: `${victim.name}'s engine back` });
  await waitFor(async () => (await victim.engine.docker.listContainers({ all: true, filters: { label: ['platform.service=spread'] } })).length === 0, 30_000, { what: `old containers removed from ${victim.name}` });
  // Longer than a healing check: nothing moves back to the machine that returned.
  await new Promise((resolve) => setTimeout(resolve, 12_000));
  const after = await settled('spread', 6);
  t.same(after.map((u) => `${u.unit}@${u.machine}`).sort(), moved.map((u) => `${u.unit}@${u.machine}`).sort(), 'the units stayed where they moved');
  const reschedules = ((await http('GET', orch('/journal?service=spread'))).body as { kind: string; message: string }[]).filter((entry) => entry.kind === 'service.rescheduled' && entry.message.includes('no Docker engine'));
  t.equal(reschedules.length, 1, 'one reschedule, no flapping');
});
