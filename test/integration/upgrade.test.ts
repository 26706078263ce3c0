import t, { type Test } from 'tap';
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

// A rolling upgrade under traffic, as docs/upgrades.md tells an operator to run it: an older
// platform — commit 7d144ed (before the store had a schema version), and the first tagged release
// once a second tag exists — runs two machines (an agent and a Docker engine each), two
// schedulers, a directory, an orchestrator and two HAProxy gateways on a real etcd, with a service
// of two units. While clients send requests through both gateways,
// every process is replaced by this build's, role by role and machine by machine: schedulers
// (the new leader migrates the store once), directory, orchestrator, agents, gateways. No request
// fails, no unit container is restarted or replaced, and the schema is written once.
//
// Gateways: a 0.1.x gateway's HAProxy stops with it, so a gateway is taken out of rotation (its
// client stops) before it is replaced and put back once the new one routes, as a load balancer in
// front of several gateways does. Agents: one built before v0.1.0 (7d144ed) revokes its machine's
// lease when stopped with SIGTERM (the scheduler would move its units at once), so it is stopped
// with SIGKILL, and the new agent takes the machine over within the lease's TTL (docs/upgrades.md).

const OLD_COMMIT = '7d144ed';
const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));
const run = promisify(execFile);

/** The commit's tree, built with this checkout's node_modules (the dependencies are those of HEAD: `git diff 7d144ed..HEAD -- package.json` changes only the version). */
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

/** Release tags, oldest first. */
async function releaseTags(): Promise<string[]> {
  const { stdout } = await run('git', ['-C', repoRoot, 'tag', '--list', 'v*.*.*', '--sort=v:refname']);
  return stdout.split('\n').filter(Boolean);
}

const work = mkdtempSync(join(tmpdir(), 'upgrade-test-'));
const stops: (() => Promise<void>)[] = [];
t.teardown(async () => {
  for (const stop of stops.reverse()) await stop().catch(() => undefined);
  rmSync(work, { recursive: true, force: true });
});
const registry = await startRegistry();
stops.push(() => registry.stop());
const repository = `upgrade/web-${randomBytes(3).toString('hex')}`;
// An agent's lease outlives a SIGKILL long enough for its successor to start, even on a busy machine.
const AGENT_TTL = '30';

type Role = PlatformProcess & { url: string };

/** One role process, of the old build or this one, at a fixed port (its successor takes the same one). */
interface Slot {
  name: string;
  role: string;
  port: number;
  flags(build: 'old' | 'new'): string[];
  env?: NodeJS.ProcessEnv;
  process?: Role;
}

interface Scenario {
  /** A commit or tag. */
  from: string;
  /** How the old agent is stopped so that its machine's lease outlives it. */
  agentStop: NodeJS.Signals;
}

async function upgradeUnderLoad(t: Test, { from, agentStop }: Scenario): Promise<void> {
  const stopsHere: (() => Promise<void>)[] = [];
  t.teardown(async () => {
    for (const stop of stopsHere.reverse()) await stop().catch(() => undefined);
  });
  const oldBin = await buildCommit(from, mkdtempSync(join(work, 'old-')));
  const etcd = await startEtcd();
  stopsHere.push(() => etcd.stop());
  const engines = [await startDockerd(), await startDockerd()];
  stopsHere.push(() => Promise.all(engines.map((engine) => engine.stop())).then(() => undefined));
  const v1 = await buildTestImage(engines[0]!.docker, registry.host, repository, 'v1', { label: 'one' });
  const store = new EtcdStore([etcd.url]);
  stopsHere.push(() => store.close());
  const flags = ['--etcd', etcd.url, '--announce-ttl', '3'];
  const machineIds = ['up-m1', 'up-m2'];

  const running = new Set<Role>();
  stopsHere.push(() => Promise.all([...running].map((role) => role.stop())).then(() => undefined));
  const start = async (slot: Slot, build: 'old' | 'new'): Promise<void> => {
    const role = await serveRole(slot.role, slot.port, slot.flags(build), slot.env, { bin: build === 'old' ? oldBin : platformBin });
    running.add(role);
    slot.process = role;
  };
  const stop = async (slot: Slot, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> => {
    await slot.process?.stop(signal);
    if (slot.process) running.delete(slot.process);
  };

  const slot = async (name: string, role: string, roleFlags: (build: 'old' | 'new') => string[] = () => [], env?: NodeJS.ProcessEnv): Promise<Slot> => ({
    name,
    role,
    port: await freePort(),
    flags: (build) => [...flags, ...roleFlags(build)],
    ...(env ? { env } : {}),
  });
  const agentFlags = (index: number) => () => ['--announce-ttl', AGENT_TTL, '--network', 'host', '--machine-id', machineIds[index]!, '--stop-grace', '2'];
  // The old builds know no --backup-dir: where this build's leader puts the backup it takes before migrating.
  const backupDir = (name: string) => join(work, `${from}-backups-${name}`);
  const schedulerFlags = (name: string) => (build: 'old' | 'new') => (build === 'new' ? ['--backup-dir', backupDir(name)] : []);
  const gatewayFlags = (name: string) => () => ['--data-plane', 'haproxy', '--data-dir', mkdtempSync(join(work, `${name}-`))];

  const schedulers = [await slot('scheduler-1', 'scheduler', schedulerFlags('1')), await slot('scheduler-2', 'scheduler', schedulerFlags('2'))];
  const directory = await slot('directory', 'directory');
  const orchestrator = await slot('orchestrator', 'orchestrator');
  const agents = await Promise.all(engines.map((engine: DockerEngine, i) => slot(`agent-${i + 1}`, 'agent', agentFlags(i), { DOCKER_HOST: engine.dockerHost })));
  const gateways = [await slot('gateway-1', 'gateway', gatewayFlags('gateway-1')), await slot('gateway-2', 'gateway', gatewayFlags('gateway-2'))];

  const service = `web-${randomBytes(2).toString('hex')}`;
  const orch = (path: string) => `http://127.0.0.1:${orchestrator.port}${path}`;
  const { settled, finished } = clusterUnits(orch(''));

  /** Every unit container of the service, on both engines: id and when it last started. */
  const unitContainers = async (): Promise<Record<string, string>> => {
    const found: Record<string, string> = {};
    for (const engine of engines) {
      for (const entry of await engine.docker.listContainers({ all: true, filters: { label: [`platform.service=${service}`] } })) {
        const info = await engine.docker.getContainer(entry.Id).inspect();
        found[info.Name] = `${info.Id} started ${info.State.StartedAt} (${info.State.Status})`;
      }
    }
    return found;
  };

  /** Waits until the gateway routes the service to both units. */
  const routable = (gateway: Slot) =>
    waitFor(async () => {
      const body = (await http('GET', `http://127.0.0.1:${gateway.port}/routes`)).body as { routes: { name: string; upstreams: unknown[] }[] };
      return body.routes.find((route) => route.name === service)?.upstreams.length === 2;
    }, 90_000, { what: `${gateway.name} to route ${service} to 2 units` });

  const loadOn = (gateway: Slot): RunningLoad =>
    startLoad({ url: `http://127.0.0.1:${gateway.port}/`, host: `${service}.platform.internal`, concurrency: 2, maxDurationMs: 30 * 60_000 });
  /** Every client's results: a gateway's client is stopped while it is out of rotation, and a new one started after. */
  const results: { gateway: string; result: LoadResult }[] = [];
  const loads = new Map<Slot, RunningLoad>();
  stopsHere.push(async () => {
    for (const load of loads.values()) await load.stop();
  });
  /** Lets traffic flow through every gateway in rotation: some more answers on each, not a fixed sleep. */
  const trafficFlows = async (): Promise<void> => {
    const marks = [...loads.values()].map((load) => load.progress.ok);
    await waitFor(async () => [...loads.values()].every((load, i) => load.progress.ok >= marks[i]! + 20), 60_000, { what: '20 more answers through every gateway in rotation' });
  };
  const takeOutOfRotation = async (gateway: Slot): Promise<void> => {
    const load = loads.get(gateway)!;
    loads.delete(gateway);
    results.push({ gateway: gateway.name, result: await load.stop() });
  };
  const migrationsJournaled = async () =>
    (await store.list(journalPrefix)).map((kv) => JSON.parse(kv.value) as { kind: string; message: string }).filter((entry) => entry.kind === 'store.migrated');

  // The old platform, deployed and under load.
  for (const role of [...schedulers, directory, orchestrator, ...agents, ...gateways]) await start(role, 'old');
  const created = await http('POST', orch('/services'), { name: service, description: 'upgraded', containerRepository: `${registry.host}/${repository}`, loadBalanced: true, publicFacing: false, numInstances: 2, conflictsWith: service });
  t.equal(created.status, 201, JSON.stringify(created.body));
  const deploy = await http('POST', orch(`/services/${service}/deploy`), { containerRepository: v1.reference });
  t.equal(deploy.status, 200, JSON.stringify(deploy.body));
  t.equal((await finished(deploy.body.deployment)).state, 'succeeded');
  t.same((await settled(service, 2)).map((unit) => unit.machine).sort(), machineIds, 'one unit on each machine');
  for (const gateway of gateways) await routable(gateway);
  const schemaBefore = await store.get(storeSchemaKey);
  const oldSchema = schemaBefore ? (JSON.parse(schemaBefore.value) as { version: number }).version : 0;
  t.comment(`${from} runs on store schema ${oldSchema}; this build knows ${STORE_SCHEMA_VERSION}`);
  const expectedMigrations = oldSchema < STORE_SCHEMA_VERSION ? 1 : 0;
  const journaledBefore = (await migrationsJournaled()).length;
  const before = await unitContainers();
  t.equal(Object.keys(before).length, 2, 'two unit containers');
  for (const gateway of gateways) loads.set(gateway, loadOn(gateway));
  await trafficFlows();

  // Schedulers first: the follower, then the leader, so that an upgraded follower is elected and migrates.
  const leaderAddress = JSON.parse((await store.get('/platform/scheduler/leader'))!.value).address as string;
  const [oldLeader, follower] = (leaderAddress.endsWith(`:${schedulers[0]!.port}`) ? schedulers : [schedulers[1]!, schedulers[0]!]) as [Slot, Slot];
  await stop(follower);
  await start(follower, 'new');
  await trafficFlows();
  await stop(oldLeader);
  const schema = await waitFor(async () => {
    const record = await store.get(storeSchemaKey);
    return record && (JSON.parse(record.value) as { version: number }).version === STORE_SCHEMA_VERSION ? record : undefined;
  }, 60_000, { what: `the store at schema ${STORE_SCHEMA_VERSION}` });
  await start(oldLeader, 'new');
  await trafficFlows();

  for (const role of [directory, orchestrator]) {
    await stop(role);
    await start(role, 'new');
    await trafficFlows();
  }

  for (const agent of agents) {
    await stop(agent, agentStop);
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
  await trafficFlows();
  for (const gateway of [...loads.keys()]) await takeOutOfRotation(gateway);

  for (const { gateway, result } of results) {
    const summary = `${gateway}: ${result.ok} ok, ${result.failed} failed in ${result.durationMs} ms${result.failures.length ? `: ${result.failures.join('; ')}` : ''}`;
    t.comment(summary);
    t.equal(result.failed, 0, summary);
    t.ok(result.ok > 0, `${gateway} answered`);
  }
  t.same(await unitContainers(), before, 'the same two containers, never restarted');

  const record = await store.get(storeSchemaKey);
  t.equal(record?.modRevision, schema.modRevision, 'the schema record was not written again after the migration');
  t.equal(record?.version, (schemaBefore?.version ?? 0) + expectedMigrations, `the schema record was written ${expectedMigrations} time(s) by the upgrade`);
  if (expectedMigrations) t.match(JSON.parse(record!.value), { version: STORE_SCHEMA_VERSION, by: platformVersion });
  const migrations = (await migrationsJournaled()).slice(journaledBefore);
  t.equal(migrations.length, expectedMigrations, `${expectedMigrations} migration(s) in the journal`);
  if (expectedMigrations) t.match(migrations[0]?.message, `store schema ${oldSchema} → ${STORE_SCHEMA_VERSION}`);
  const backups = ['1', '2'].flatMap((name) => readdirSafe(backupDir(name)));
  t.equal(backups.length, expectedMigrations, `one pre-migration backup per migration (${backups.join(', ')})`);

  // platform version: the client, the store schema and every running component at the new version.
  const { stdout } = await run(process.execPath, [platformBin, 'version', '--orchestrator', orch('')], { timeout: 60_000 });
  t.match(stdout, `platform ${platformVersion} (this client; store schema ${STORE_SCHEMA_VERSION})`);
  t.match(stdout, `store schema ${STORE_SCHEMA_VERSION}\n`);
  const rows = stdout.split('\n').filter((line) => / \d+\.\d+\.\d+ /.test(line) && !line.startsWith('platform '));
  t.equal(rows.length, 8, `8 components listed:\n${stdout}`);
  t.ok(rows.every((row) => row.includes(` ${platformVersion} `)), 'each at this version');
  for (const role of ['agent', 'directory', 'gateway', 'orchestrator', 'scheduler']) t.ok(rows.some((row) => row.startsWith(role)), `${role} listed`);
}

t.test(`from ${OLD_COMMIT} (no schema version), role by role under load: no request fails, no unit restarts, the schema is migrated once`, (t) =>
  upgradeUnderLoad(t, { from: OLD_COMMIT, agentStop: 'SIGKILL' }),
);

// Once this version is tagged too, the upgrade from the first tagged release (v0.1.0, whose agent
// keeps its machine's lease on SIGTERM) to this build is tested the same way.
const tags = await releaseTags();
if (tags.length >= 2) {
  t.test(`from the first tagged release ${tags[0]} to this build, role by role under load`, (t) => upgradeUnderLoad(t, { from: tags[0]!, agentStop: 'SIGTERM' }));
} else {
  t.comment(`only ${tags.length} release tag (${tags.join(', ')}): the upgrade from the first tagged release runs once a second tag exists`);
}

function readdirSafe(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}
