import t from 'tap';
import { randomBytes } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEtcd } from '../harness/etcd.js';
import { startDockerd } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { holdDefaultPorts } from '../harness/default-ports.js';
import { http, runOperatorCommand as platform, runPlatform, serveRole, waitHealthy, type PlatformProcess } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';
import { parseBackupFileName } from '../../src/backup/backup-directory.js';
import { EtcdStore } from '../../src/store/etcd-store.js';
import { acmeStatusKey } from '../../src/store/keys.js';

// Issue 28, scheduled backups: the leading scheduler with --backup-dir, --backup-interval and
// --backup-keep writes verified backups and rotates them, on real etcd (with a failover) and on
// the embedded store of `platform up`, from inside the process that holds it. Then the restore
// drill of a single-machine install: that backup restored into a new --data-dir, `platform up`
// on it adopts the running units, restarting none.

const INTERVAL_MS = 5000;
const work = mkdtempSync(join(tmpdir(), 'scheduled-backups-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

const backupsIn = (dir: string): string[] => (existsSync(dir) ? readdirSync(dir).filter((name) => parseBackupFileName(name)).sort() : []);
const takenAt = (name: string): number => parseBackupFileName(name)!.takenAt.getTime();

interface JournalLine {
  kind: string;
  message: string;
}
const journal = async (scheduler: string, kind: string): Promise<JournalLine[]> =>
  ((await http('GET', `${scheduler}/journal?limit=500`)).body as JournalLine[]).filter((line) => line.kind === kind);

interface BackupState {
  newest?: string;
  warning?: string;
  lastFailure?: { message: string };
}
const readiness = async (scheduler: string): Promise<{ code: number; leader?: boolean; backups?: BackupState }> => {
  const reply = await http('GET', `${scheduler}/readyz`);
  return { code: reply.status, ...(reply.body as { leader?: boolean; backups?: BackupState }) };
};

t.test('the leader on etcd writes verified 0600 backups, keeps the newest N, and warns on /readyz when they stop', async (t) => {
  const etcd = await startEtcd();
  t.teardown(() => etcd.stop());
  const dir = join(work, 'etcd', 'backups');
  const flags = ['--etcd', etcd.url, '--announce-ttl', '3', '--backup-dir', dir, '--backup-interval', `${INTERVAL_MS / 1000}s`, '--backup-keep', '2'];
  const directory = await serveRole('directory', await freePort(), ['--etcd', etcd.url]);
  const first = await serveRole('scheduler', await freePort(), flags);
  const second = await serveRole('scheduler', await freePort(), flags);
  t.teardown(() => Promise.all([directory, first, second].map((role) => role.stop())).then(() => undefined));
  const service = `kept-${randomBytes(2).toString('hex')}`;
  t.equal((await http('POST', `${directory.url}/services`, { name: service, description: 'backed up on a schedule', containerImage: 'registry.local/kept' })).status, 201);

  const leader = await waitFor(async () => {
    for (const scheduler of [first, second]) if ((await readiness(scheduler.url)).leader) return scheduler;
    return undefined;
  }, 30_000, { what: 'a scheduler leader' });
  const follower = leader === first ? second : first;
  await waitFor(async () => (await journal(leader.url, 'backup.succeeded')).length >= 3, 60_000, { what: 'three scheduled backups' });
  // Rotation follows each write; the third one's may still be under way. Copied at once, to be
  // checked at leisure: the next rotation may delete them while they are.
  const copies = join(work, 'etcd', 'copies');
  mkdirSync(copies);
  const kept = await waitFor(() => {
    const names = backupsIn(dir);
    if (names.length !== 2) return undefined;
    for (const name of names) {
      t.equal(statSync(join(dir, name)).mode & 0o777, 0o600, `${name} is readable by its owner only`);
      copyFileSync(join(dir, name), join(copies, name));
    }
    return names;
  }, 15_000, { what: 'rotation down to --backup-keep 2' });
  t.equal(statSync(dir).mode & 0o777, 0o700, 'the directory was created readable by its owner only');
  for (const name of kept) {
    const verified = await platform('backup', 'verify', join(copies, name));
    t.equal(verified.code, 0, verified.stderr);
  }
  const [line] = await journal(leader.url, 'backup.succeeded');
  t.match(line!.message, new RegExp(`^backup ${dir}/platform-[^ ]+\\.backup written and verified: \\d+ keys at revision \\d+, [\\d.]+ kB`));
  t.ok((await journal(leader.url, 'backup.succeeded')).some((entry) => /; deleted platform-/.test(entry.message)), 'a rotation is journalled');

  const newestNow = async () => {
    const metrics = (await http('GET', `${leader.url}/metrics`)).body as string;
    const metric = /^platform_backup_last_success_timestamp_seconds (\S+)$/m.exec(metrics);
    return { metric: metric ? Number(metric[1]) : undefined, newest: backupsIn(dir).at(-1)! };
  };
  const sample = await waitFor(async () => {
    const now = await newestNow();
    return now.metric === takenAt(now.newest) / 1000 ? now : undefined;
  }, 15_000, { what: 'the metric at the newest backup' });
  t.ok(sample.metric, `platform_backup_last_success_timestamp_seconds ${sample.metric}`);
  const healthy = await readiness(leader.url);
  t.equal(healthy.code, 200);
  t.notOk(healthy.backups?.warning, 'no warning while backups are fresh');
  t.notOk((await readiness(follower.url)).backups?.warning, 'a follower takes none and does not warn');

  // A record that breaks its schema: every backup now fails verification, and none is written.
  const store = new EtcdStore([etcd.url]);
  t.teardown(() => store.close());
  await store.put(acmeStatusKey('broken.example.com'), 'not json');
  const failures = await waitFor(async () => {
    const failed = await journal(leader.url, 'backup.failed');
    return failed.length > 0 ? failed : undefined;
  }, 30_000, { what: 'a failed backup in the journal' });
  const atFirstFailure = backupsIn(dir);
  t.match(failures[0]!.message, `does not verify: record ${acmeStatusKey('broken.example.com')} (ACME status) does not match its schema: not JSON`);
  const stale = await waitFor(async () => {
    const ready = await readiness(leader.url);
    return ready.backups?.warning ? ready : undefined;
  }, 60_000, { what: 'a /readyz warning' });
  t.equal(stale.code, 200, 'still ready: a stale backup is a warning');
  t.match(stale.backups!.warning, /is older than 2 backup intervals/);
  t.match(stale.backups!.lastFailure?.message, /does not verify/);
  const during = backupsIn(dir);
  t.ok(Date.now() - takenAt(during.at(-1)!) > 2 * INTERVAL_MS, 'the newest file is older than two intervals');
  t.equal(during.length, 2);
  t.same(during, atFirstFailure, 'the verified backups stay, the newest included: failed ones delete nothing');

  await store.delete(acmeStatusKey('broken.example.com'));
  await waitFor(async () => {
    const ready = await readiness(leader.url);
    return ready.backups?.newest && !ready.backups.warning && !ready.backups.lastFailure;
  }, 30_000, { what: 'backups again, and the warning gone' });

  // Failover: the follower leads from the newest backup in the directory, an interval after it, not at once.
  // Stopped just after a backup, so none is under way: the next is an interval off.
  const last = backupsIn(dir).at(-1)!;
  await waitFor(() => backupsIn(dir).at(-1)! > last, 30_000, { what: 'one more backup' });
  await leader.stop();
  const before = backupsIn(dir).at(-1)!;
  await waitFor(async () => (await readiness(follower.url)).leader, 30_000, { what: 'the follower leading' });
  const next = await waitFor(() => backupsIn(dir).find((name) => name > before), 30_000, { what: "the new leader's first backup" });
  t.ok(takenAt(next) - takenAt(before) >= INTERVAL_MS - 50, `the new leader waited out the interval: ${before} then ${next}`);
  await waitFor(async () => (await journal(follower.url, 'backup.succeeded')).some((entry) => entry.message.includes(next)), 15_000, { what: 'its journal line' });
});

t.test('platform up backs its embedded store up live; the backup restored into a new --data-dir is adopted, no unit restarted', async (t) => {
  const engine = await startDockerd();
  const registry = await startRegistry();
  t.teardown(async () => {
    await registry.stop();
    await engine.stop();
  });
  const repository = `scheduled-backups/web-${randomBytes(3).toString('hex')}`;
  const image = await buildTestImage(engine.docker, registry.host, repository, 'v1');
  const dir = join(work, 'up', 'backups');
  const machine = `backups-${randomBytes(2).toString('hex')}`;
  const upArgs = (dataDir: string) => ['up', '--data-dir', dataDir, '--network', 'host', '--machine-id', machine, '--stop-grace', '2'];
  const start = async (args: string[]): Promise<PlatformProcess> => {
    const up = runPlatform(args, { DOCKER_HOST: engine.dockerHost });
    await Promise.all([9000, 9001, 9002, 9003].map((port) => waitHealthy(`http://127.0.0.1:${port}`, up)));
    return up;
  };
  // `platform up` listens on the default ports, as deploy-e2e and restarts do: one at a time.
  const releaseDefaultPorts = await holdDefaultPorts();
  let up: PlatformProcess | undefined;
  t.teardown(async () => {
    await up?.stop();
    await releaseDefaultPorts();
  });
  const scheduler = 'http://127.0.0.1:9002';
  up = await start([...upArgs(join(work, 'up', 'data-a')), '--backup-dir', dir, '--backup-interval', `${INTERVAL_MS / 1000}s`, '--backup-keep', '3']);

  const service = `web-${randomBytes(2).toString('hex')}`;
  const declaration = { name: service, description: 'restored', containerImage: `${registry.host}/${repository}`, numInstances: 2 };
  t.equal((await http('POST', 'http://127.0.0.1:9001/services', declaration)).status, 201);
  const deploy = await http('POST', `${scheduler}/hooks/deploy`, { serviceName: service, containerRepository: image.reference, pushedAt: 0 });
  t.equal(deploy.status, 200, JSON.stringify(deploy.body));
  await runningUnits(service);
  await waitFor(async () => {
    const deployments = (await http('GET', `${scheduler}/deployments?service=${service}`)).body as { state: string }[];
    return deployments.length === 1 && deployments[0]!.state === 'succeeded';
  }, 60_000, { what: 'the deployment succeeded' });
  const deployedAt = Date.now();
  const containers = await unitContainers(service);
  t.equal(Object.keys(containers).length, 2);

  // A backup taken after the deploy settled, live, by the scheduler inside `platform up`; copied at
  // once, as an operator copies backups off the machine, before rotation deletes it.
  const file = join(work, 'up', 'copied.backup');
  await waitFor(() => {
    const name = backupsIn(dir).find((backup) => takenAt(backup) > deployedAt);
    if (name) copyFileSync(join(dir, name), file);
    return name;
  }, 30_000, { what: 'a backup after the deploy' });
  t.equal((await platform('backup', 'verify', file)).code, 0, 'it verifies');
  await up.stop();
  up = undefined;

  const restoredDir = join(work, 'up', 'data-b');
  const restored = await platform('backup', 'restore', file, '--data-dir', restoredDir);
  t.equal(restored.code, 0, restored.stderr);
  up = await start(upArgs(restoredDir));
  await runningUnits(service);
  // The leader's renewal grace has ended and it has healed since: a machine taken for lost would have had its units moved.
  await waitFor(async () => {
    const ready = (await http('GET', `${scheduler}/readyz`)).body as { leader?: boolean; renewalGraceUntil?: string; healedAt?: string };
    return ready.leader && ready.renewalGraceUntil && ready.healedAt && Date.parse(ready.healedAt) > Date.parse(ready.renewalGraceUntil);
  }, 90_000, { what: "a heal pass after the scheduler's renewal grace" });
  t.same(await unitContainers(service), containers, 'the same containers, never restarted');
  const deployments = (await http('GET', `${scheduler}/deployments?service=${service}`)).body as { trigger: string; state: string }[];
  t.same(deployments.map((d) => d.state), ['succeeded'], `no deployment but the first: ${deployments.map((d) => `${d.trigger} ${d.state}`).join(', ')}`);

  /** Each unit container's id and start time: what a recreate or a restart changes. */
  async function unitContainers(name: string): Promise<Record<string, string>> {
    const listed = await engine.docker.listContainers({ all: true, filters: { label: [`platform.service=${name}`] } });
    const inspected = await Promise.all(listed.map((c) => engine.docker.getContainer(c.Id).inspect()));
    return Object.fromEntries(inspected.map((c) => [c.Name, `${c.Id} started ${c.State.StartedAt} running ${c.State.Running}`]));
  }
});

async function runningUnits(service: string): Promise<void> {
  await waitFor(async () => {
    const units = (await http('GET', `http://127.0.0.1:9000/services/${service}/units`)).body as { active: string; sub: string }[];
    return units.length === 2 && units.every((unit) => unit.active === 'active' && unit.sub === 'running');
  }, 90_000, { what: `two running units of ${service}` });
}
