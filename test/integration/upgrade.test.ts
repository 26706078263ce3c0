import t from 'tap';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { startEtcd } from '../harness/etcd.js';
import { startDockerd, type DockerEngine } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { http, platformBin, serveRole, type PlatformProcess } from '../harness/platform.js';
import { clusterUnits } from '../harness/cluster-units.js';
import { startLoad, type LoadResult, type RunningLoad } from '../harness/http-load.js';
import { waitFor } from '../harness/wait.js';
import { EtcdStore } from '../../src/store/etcd-store.js';
import { journalPrefix, storeSchemaKey } from '../../src/store/keys.js';
import { STORE_SCHEMA_VERSION } from '../../src/store/schema-version.js';
import { platformVersion } from '../../src/platform-version.js';

// A rolling upgrade under traffic, as docs/upgrades.md tells an operator to run it: the platform
// of commit 7d144ed (0.1.x, before the store had a schema version) runs two machines (an agent and
// a Docker engine each), two schedulers, a directory, an orchestrator and two HAProxy gateways on
// a real etcd, with a service of two units. While clients send requests through both gateways,
// every process is replaced by this build's, role by role and machine by machine: schedulers
// (the new leader migrates the store once), directory, orchestrator, agents, gateways. No request
// fails, no unit container is restarted or replaced, and the schema is written once.
//
// Gateways: a 0.1.x gateway's HAProxy stops with it, so a gateway is taken out of rotation (its
// client stops) before it is replaced and put back once the new one routes, as a load balancer in
// front of several gateways does. Agents: a 0.1.x agent revokes its machine's lease when stopped
// with SIGTERM (the scheduler would move its units at once), so it is stopped with SIGKILL, and
// the new agent takes the machine over within the lease's TTL (docs/upgrades.md says so).

const OLD_COMMIT = '7d144ed';
const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));
const run = promisify(execFile);

/** The old commit's tree, built with this checkout's node_modules (package.json is the same at both: `git diff 7d144ed..HEAD -- package.json` is empty). */
async function buildCommit(commit: string, into: string): Promise<string> {
  await run('git', ['-C', repoRoot, 'cat-file', '-e', `${commit}^{commit}`]).catch(() => {
    throw new Error(`commit ${commit} is not in the clone at ${repoRoot}: the upgrade test needs it (git fetch --unshallow, or fetch that commit)`);
  });
  await run('bash', ['-o', 'pipefail', '-c', `git -C '${repoRoot}' archive ${commit} | tar -x -C '${into}'`]);
  symlinkSync(join(repoRoot, 'node_modules'), join(into, 'node_modules'));
  const tsc = join(repoRoot, 'node_modules', 'typescript', 'bin', 'tsc');
  await run(process.execPath, [tsc, '-p', into], { timeout: 600_000 });
  await run(process.execPath, [tsc, '-p', join(into, 'src', 'web')], { timeout: 600_000 });
  await run(process.execPath, [join(into, 'src', 'web', 'assemble.mjs')], { cwd: into, timeout: 120_000 });
  return join(into, 'bin', 'platform');
}

const work = mkdtempSync(join(tmpdir(), 'upgrade-test-'));
const stops: (() => Promise<void>)[] = [];
t.teardown(async () => {
  for (const stop of stops.reverse()) await stop().catch(() => undefined);
  rmSync(work, { recursive: true, force: true });
});

const oldBin = await buildCommit(OLD_COMMIT, mkdtempSync(join(work, 'old-')));
const etcd = await startEtcd();
stops.push(() => etcd.stop());
const registry = await startRegistry();
stops.push(() => registry.stop());
const engines = [await startDockerd(), await startDockerd()];
stops.push(() => Promise.all(engines.map((engine) => engine.stop())).then(() => undefined));
const repository = `upgrade/web-${randomBytes(3).toString('hex')}`;
const v1 = await buildTestImage(engines[0]!.docker, registry.host, repository, 'v1', { label: 'one' });
const store = new EtcdStore([etcd.url]);
stops.push(() => store.close());

type Role = PlatformProcess & { url: string };
const flags = ['--etcd', etcd.url, '--announce-ttl', '3'];
// An agent's lease outlives a SIGKILL long enough for its successor to start, even on a busy machine.
const AGENT_TTL = '30';
const machineIds = ['up-m1', 'up-m2'];

/** One role process, of the old build or this one, at a fixed port (its successor takes the same one). */
interface Slot {
  name: string;
  role: string;
  port: number;
  flags(build: 'old' | 'new'): string[];
  env?: NodeJS.ProcessEnv;
  process?: Role;
}

const running = new Set<Role>();
stops.push(() => Promise.all([...running].map((role) => role.stop())).then(() => undefined));

async function start(slot: Slot, build: 'old' | 'new'): Promise<void> {
  const role = await serveRole(slot.role, slot.port, slot.flags(build), slot.env, { bin: build === 'old' ? oldBin : platformBin });
  running.add(role);
  slot.process = role;
}

async function stop(slot: Slot, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  await slot.process?.stop(signal);
  if (slot.process) running.delete(slot.process);
}

const gatewayDir = (name: string) => mkdtempSync(join(work, `${name}-`));
const slot = async (name: string, role: string, roleFlags: (build: 'old' | 'new') => string[] = () => [], env?: NodeJS.ProcessEnv): Promise<Slot> => ({
  name,
  role,
  port: await freePort(),
  flags: (build) => [...flags, ...roleFlags(build)],
  ...(env ? { env } : {}),
});
const agentFlags = (index: number) => () => ['--announce-ttl', AGENT_TTL, '--network', 'host', '--machine-id', machineIds[index]!, '--stop-grace', '2'];
// Only this build knows --backup-dir: where the leader puts the backup it takes before migrating.
const schedulerFlags = (name: string) => (build: 'old' | 'new') => (build === 'new' ? ['--backup-dir', join(work, `backups-${name}`)] : []);
const gatewayFlags = (name: string) => () => ['--data-plane', 'haproxy', '--data-dir', gatewayDir(name)];

const schedulers = [await slot('scheduler-1', 'scheduler', schedulerFlags('1')), await slot('scheduler-2', 'scheduler', schedulerFlags('2'))];
const directory = await slot('directory', 'directory');
const orchestrator = await slot('orchestrator', 'orchestrator');
const agents = await Promise.all(engines.map((engine: DockerEngine, i) => slot(`agent-${i + 1}`, 'agent', agentFlags(i), { DOCKER_HOST: engine.dockerHost })));
const gateways = [await slot('gateway-1', 'gateway', gatewayFlags('gateway-1')), await slot('gateway-2', 'gateway', gatewayFlags('gateway-2'))];

const service = `web-${randomBytes(2).toString('hex')}`;
const orch = (path: string) => `http://127.0.0.1:${orchestrator.port}${path}`;
const { settled, finished } = clusterUnits(`http://127.0.0.1:${orchestrator.port}`);

/** Every unit container of the service, on both engines: id and when it last started. */
async function unitContainers(): Promise<Record<string, string>> {
  const found: Record<string, string> = {};
  for (const engine of engines) {
    for (const entry of await engine.docker.listContainers({ all: true, filters: { label: [`platform.service=${service}`] } })) {
      const info = await engine.docker.getContainer(entry.Id).inspect();
      found[info.Name] = `${info.Id} started ${info.State.StartedAt} (${info.State.Status})`;
    }
  }
  return found;
}

/** Waits until the gateway routes the service to both units. */
const routable = (gateway: Slot) =>
  waitFor(async () => {
    const body = (await http('GET', `http://127.0.0.1:${gateway.port}/routes`)).body as { routes: { name: string; upstreams: unknown[] }[] };
    return body.routes.find((route) => route.name === service)?.upstreams.length === 2;
  }, 90_000, { what: `${gateway.name} to route ${service} to 2 units` });

const loadOn = (gateway: Slot): RunningLoad =>
  startLoad({ url: `http://127.0.0.1:${gateway.port}/`, host: `${service}.platform.internal`, concurrency: 2, maxDurationMs: 30 * 60_000 });

/** Every client's results; a gateway's client is stopped while it is replaced and a new one started after. */
const results: { gateway: string; result: LoadResult }[] = [];
const loads = new Map<Slot, RunningLoad>();
stops.push(async () => {
  for (const load of loads.values()) await load.stop();
});

/** Lets traffic flow through every gateway in rotation: some more answers on each, not a fixed sleep. */
async function trafficFlows(): Promise<void> {
  const marks = [...loads.values()].map((load) => load.progress.ok);
  await waitFor(async () => [...loads.values()].every((load, i) => load.progress.ok >= marks[i]! + 20), 60_000, { what: '20 more answers through every gateway in rotation' });
}

async function takeOutOfRotation(gateway: Slot): Promise<void> {
  const load = loads.get(gateway)!;
  loads.delete(gateway);
  results.push({ gateway: gateway.name, result: await load.stop() });
}

let before: Record<string, string> = {};

t.test(`the platform of ${OLD_COMMIT} runs a service of two units on two machines, under load through two gateways`, async (t) => {
  for (const role of [...schedulers, directory, orchestrator, ...agents, ...gateways]) await start(role, 'old');
  const created = await http('POST', orch('/services'), { name: service, description: 'upgraded', containerRepository: `${registry.host}/${repository}`, loadBalanced: true, publicFacing: false, numInstances: 2, conflictsWith: service });
  t.equal(created.status, 201, JSON.stringify(created.body));
  const deploy = await http('POST', orch(`/services/${service}/deploy`), { containerRepository: v1.reference });
  t.equal(deploy.status, 200, JSON.stringify(deploy.body));
  t.equal((await finished(deploy.body.deployment)).state, 'succeeded');
  const units = await settled(service, 2);
  t.same(units.map((unit) => unit.machine).sort(), machineIds, 'one unit on each machine');
  for (const gateway of gateways) await routable(gateway);
  t.equal(await store.get(storeSchemaKey), undefined, `${OLD_COMMIT} has no schema version`);
  before = await unitContainers();
  t.equal(Object.keys(before).length, 2, 'two unit containers');
  for (const gateway of gateways) loads.set(gateway, loadOn(gateway));
  await trafficFlows();
});

t.test('replaced role by role and machine by machine, no request fails, no unit restarts, the schema is migrated once', async (t) => {
  // Schedulers first: the follower, then the leader, so the new follower is elected and migrates.
  const leaderPort = async () => JSON.parse((await store.get('/platform/scheduler/leader'))!.value).address as string;
  const leaderFirst = (await leaderPort()).endsWith(`:${schedulers[0]!.port}`) ? [schedulers[0]!, schedulers[1]!] : [schedulers[1]!, schedulers[0]!];
  const [oldLeader, follower] = leaderFirst as [Slot, Slot];
  await stop(follower);
  await start(follower, 'new');
  await trafficFlows();
  await stop(oldLeader);
  const schema = await waitFor(async () => store.get(storeSchemaKey), 60_000, { what: 'the new leader to migrate the store' });
  await start(oldLeader, 'new');
  await trafficFlows();

  for (const role of [directory, orchestrator]) {
    await stop(role);
    await start(role, 'new');
    await trafficFlows();
  }

  for (const agent of agents) {
    await stop(agent, 'SIGKILL');
    await start(agent, 'new');
    await settled(service, 2);
    await trafficFlows();
  }

  for (const gateway of gateways) {
    await takeOutOfRotation(gateway);
    await stop(gateway);
    await start(gateway, 'new');
    await routable(gateway);
    loads.set(gateway, loadOn(gateway));
    await trafficFlows();
  }
  for (const gateway of [...loads.keys()]) await takeOutOfRotation(gateway);

  for (const { gateway, result } of results) {
    const summary = `${gateway}: ${result.ok} ok, ${result.failed} failed in ${result.durationMs} ms${result.failures.length ? `: ${result.failures.join('; ')}` : ''}`;
    t.comment(summary);
    t.equal(result.failed, 0, summary);
    t.ok(result.ok > 0, `${gateway} answered`);
  }
  t.same(await unitContainers(), before, 'the same two containers, never restarted');

  const record = await store.get(storeSchemaKey);
  t.equal(record?.version, 1, 'the schema record was written once');
  t.equal(record?.modRevision, schema.modRevision, 'and not since the migration');
  t.match(JSON.parse(record!.value), { version: STORE_SCHEMA_VERSION, by: platformVersion });
  const migrations = (await store.list(journalPrefix)).map((kv) => JSON.parse(kv.value) as { kind: string; message: string }).filter((entry) => entry.kind === 'store.migrated');
  t.equal(migrations.length, 1, 'one migration in the journal');
  t.match(migrations[0]?.message, `store schema 0 → ${STORE_SCHEMA_VERSION}`);
  const backups = schedulers.flatMap((scheduler) => readdirSafe(join(work, `backups-${scheduler.name.slice(-1)}`)));
  t.equal(backups.length, 1, `one pre-migration backup (${backups.join(', ')})`);
});

t.test('platform version lists the client, the store schema and every running component at the new version', async (t) => {
  const { stdout } = await run(process.execPath, [platformBin, 'version', '--orchestrator', orch('')], { timeout: 60_000 });
  t.match(stdout, `platform ${platformVersion} (this client; store schema ${STORE_SCHEMA_VERSION})`);
  t.match(stdout, `store schema ${STORE_SCHEMA_VERSION}\n`);
  const rows = stdout.split('\n').filter((line) => / \d+\.\d+\.\d+ /.test(line) && !line.startsWith('platform '));
  t.equal(rows.length, 8, `8 components listed:\n${stdout}`);
  t.ok(rows.every((row) => row.includes(` ${platformVersion} `)), 'each at this version');
  for (const role of ['agent', 'directory', 'gateway', 'orchestrator', 'scheduler']) t.ok(rows.some((row) => row.startsWith(role)), `${role} listed`);
});

function readdirSafe(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}
