import t from 'tap';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { Etcd3 } from 'etcd3';
import type { FastifyBaseLogger } from 'fastify';
import { EtcdStore } from '../../src/store/etcd-store.js';
import { StoreUnavailableError } from '../../src/store/store.js';
import { assignmentRoot, deploymentKey, deploymentPrefix, schedulerLeaderKey } from '../../src/store/keys.js';
import { Scheduler } from '../../src/roles/scheduler/scheduler.js';
import { newDeploymentId } from '../../src/store/records/deployments.js';
import type { Assignment } from '../../src/schemas/cluster.js';
import type { Deployment } from '../../src/schemas/release.js';
import { startEtcd } from '../harness/etcd.js';
import { startDockerd } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { http, serveRole } from '../harness/platform.js';
import { interceptWritesTo } from '../harness/lost-answers.js';
import { waitFor } from '../harness/wait.js';

// A deployment in flight is never left without a rollout, on a real etcd, dockerd, registry and
// agent, with the scheduler in this process so the test can hold etcd still at the one moment
// that matters. Seen in bench/scale.ts (issue 29): after a scheduler lost and won its lead under
// load, some roll deployments stayed `rolling` for ever, and since healing leaves a service alone
// while its deployment is in flight, the units of a host lost then were never placed again.

const log = pino({ level: 'silent' }) as unknown as FastifyBaseLogger;
const LEASE_TTL_SECONDS = 10;
/** Longer than a store call's attempts (1.5 s deadline each), shorter than every lease's TTL. */
const FREEZE_MS = 5000;

const [etcd, engine, registry] = await Promise.all([startEtcd(), startDockerd({ bridge: false }), startRegistry()]);
const repository = `takeover/web-${randomBytes(3).toString('hex')}`;
const v1 = await buildTestImage(engine.docker, registry.host, repository, 'v1', { label: 'one' });
const v2 = await buildTestImage(engine.docker, registry.host, repository, 'v2', { label: 'two' });
const flags = ['--etcd', etcd.url, '--announce-ttl', String(LEASE_TTL_SECONDS)];
const directory = await serveRole('directory', await freePort(), flags);
const orchestrator = await serveRole('orchestrator', await freePort(), flags);
const agent = await serveRole('agent', await freePort(), [...flags, '--network', 'host', '--machine-id', `takeover-${randomBytes(2).toString('hex')}`, '--stop-grace', '2'], {
  DOCKER_HOST: engine.dockerHost,
});

const store = new EtcdStore([etcd.url]);
const etcdClient = new Etcd3({ hosts: etcd.url });
/** Once armed, the next election write that commits holds etcd still for FREEZE_MS before its answer. */
let freezeAfterElection = false;
const electionFreezes: number[] = [];
const schedulerStore = interceptWritesTo(store, schedulerLeaderKey, async (result) => {
  if (freezeAfterElection && result.succeeded) {
    freezeAfterElection = false;
    etcd.freeze();
    electionFreezes.push(Date.now());
    setTimeout(() => etcd.thaw(), FREEZE_MS).unref();
  }
  return result;
});
const backupDir = mkdtempSync(join(tmpdir(), 'takeover-'));
const scheduler = new Scheduler({
  store: schedulerStore,
  log,
  id: 'takeover-scheduler',
  address: '127.0.0.1:1',
  announce: false,
  leaseTtlSeconds: LEASE_TTL_SECONDS,
  registry: { allowedRegistries: [registry.host] },
  backupDir,
});
t.teardown(async () => {
  etcd.thaw();
  await scheduler.close();
  await Promise.all([agent, orchestrator, directory].map((role) => role.stop()));
  etcdClient.close();
  await store.close();
  await registry.stop();
  await engine.stop();
  await etcd.stop();
  rmSync(backupDir, { recursive: true, force: true });
});
await scheduler.start();
await waitFor(() => scheduler.isLeader(), 15_000, { what: 'the scheduler to lead' });

const deployments = async (service: string): Promise<Deployment[]> =>
  (await store.list(deploymentPrefix)).map((kv) => JSON.parse(kv.value) as Deployment).filter((d) => d.service === service);
const assignmentsOf = async (service: string): Promise<Assignment[]> =>
  (await store.list(assignmentRoot)).map((kv) => JSON.parse(kv.value) as Assignment).filter((a) => a.service === service);

async function declare(service: string, config: Record<string, unknown>): Promise<void> {
  const created = await http('POST', `${directory.url}/services`, { name: service, containerImage: `${registry.host}/${repository}` });
  if (created.status !== 201) throw new Error(`declaring ${service}: ${JSON.stringify(created.body)}`);
  const configured = await http('PATCH', `${orchestrator.url}/services/${service}/config/next`, config);
  if (configured.status !== 200) throw new Error(`configuring ${service}: ${JSON.stringify(configured.body)}`);
}

/** A deploy, asked again while the store is refused (as a pipeline asks again after a 503): etcd was just held still. */
async function deploy(service: string, reference: string): Promise<string> {
  const triggeredAt = Date.now();
  const reply = await waitFor(
    async () => {
      try {
        return await scheduler.deploy({ serviceName: service, containerRepository: reference, pushedAt: 0, triggeredAt, trigger: 'manual' });
      } catch (error) {
        if (error instanceof StoreUnavailableError) return undefined;
        throw error;
      }
    },
    30_000,
    { what: `the scheduler to take the deploy of ${service}` },
  );
  if (!reply.deployment) throw new Error(`deploying ${service}: ${JSON.stringify(reply)}`);
  return reply.deployment;
}

/** Waits for the deployment to end and returns its record: it must not stay in flight. */
const finished = (service: string, id: string, timeoutMs: number) =>
  waitFor(async () => {
    const record = (await deployments(service)).find((d) => d.id === id);
    return record && ['succeeded', 'failed', 'reverted', 'superseded'].includes(record.state) ? record : undefined;
  }, timeoutMs, { what: `deployment ${id} of ${service} to end` });

t.test('a leader deposed mid-rollout whose takeover fails part-way (etcd held still) carries the rollout on and it succeeds', async (t) => {
  const service = 'takeover-roll';
  // minReadySeconds keeps the roll in flight long enough to depose the scheduler during it.
  await declare(service, { numInstances: 2, minReadySeconds: 4, progressDeadlineSeconds: 300 });
  const first = await deploy(service, v1.reference);
  t.equal((await finished(service, first, 60_000)).state, 'succeeded', 'v1 deployed');
  const roll = await deploy(service, v2.reference);
  await waitFor(async () => (await deployments(service)).find((d) => d.id === roll)?.state === 'rolling', 30_000, { what: 'the roll to be rolling' });

  // The leader loses its lease (as when its keep-alives miss under load) and campaigns again; the
  // election write commits, and then etcd stands still for 5 s: the new term's first reads fail.
  freezeAfterElection = true;
  const leader = await store.get(schedulerLeaderKey);
  t.ok(leader?.lease, 'the leader key has a lease');
  await etcdClient.leaseClient.leaseRevoke({ ID: leader!.lease! });
  await waitFor(() => electionFreezes.length === 1, 15_000, { what: 'the scheduler elected again, and etcd held still after it' });

  const record = await finished(service, roll, 90_000);
  t.equal(record.state, 'succeeded', `the roll ended succeeded (${record.state}: ${record.reason ?? ''})`);
  const units = await assignmentsOf(service);
  t.equal(units.length, 2, 'two units assigned');
  t.ok(units.every((unit) => unit.release === 2), `every unit runs v2 (${units.map((u) => `${u.unit} v${u.release}`).join(', ')})`);
});

t.test('a deployment in flight that no rollout runs (its record left by a takeover or an outcome that was not recorded) is carried on by the heal pass', async (t) => {
  const service = 'takeover-orphan';
  await declare(service, { numInstances: 1 });
  const first = await deploy(service, v1.reference);
  const done = await finished(service, first, 60_000);
  t.equal(done.state, 'succeeded', 'v1 deployed');
  // A record in flight for the service's release, newer than every other and run by nobody: what a
  // takeover that failed before it resumed the deployments, or a rollout whose outcome could not be
  // written, leaves behind.
  const { finishedAt: _finished, reason: _reason, ...unfinished } = done;
  const orphan: Deployment = { ...unfinished, id: newDeploymentId(), trigger: 'manual', state: 'rolling', units: [], createdAt: new Date().toISOString(), updatedAt: new Date().toISOString() };
  await store.put(deploymentKey(orphan.id), JSON.stringify(orphan));
  // The heal pass runs every 10 s.
  const record = await finished(service, orphan.id, 30_000);
  t.equal(record.state, 'succeeded', `the orphaned deployment ended succeeded (${record.state}: ${record.reason ?? ''})`);
});
