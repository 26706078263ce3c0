import t from 'tap';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEtcd, type EtcdProcess } from '../harness/etcd.js';
import { startDockerd } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { makeServerCertificate } from '../harness/tls-certificates.js';
import { http, runOperatorCommand as platform, serveRole } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';
import { decodeBackup, encodeBackup } from '../../src/backup/backup-file.js';
import { writePrivateFile } from '../../src/backup/take-backup.js';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import { EtcdStore } from '../../src/store/etcd-store.js';
import { releasePrefix, ROOT } from '../../src/store/keys.js';

// Backup and restore of the platform's own state on real etcd, dockerd and registry, with every
// role in its own process: a deployed service, tokens, a registry login and a certificate are
// backed up; etcd's data is destroyed; the backup goes into a new etcd; the roles started on it
// find everything, adopt the running unit without restarting it, and accept a token made before
// the backup but not one made after. Then the same backup through the embedded store.

const engine = await startDockerd();
const registry = await startRegistry();
const repository = `backup/web-${randomBytes(3).toString('hex')}`;
const [v1, v2] = await Promise.all([
  buildTestImage(engine.docker, registry.host, repository, 'v1', { label: 'one' }),
  buildTestImage(engine.docker, registry.host, repository, 'v2', { label: 'two' }),
]);
const work = mkdtempSync(join(tmpdir(), 'backup-test-'));
const backupFile = join(work, 'platform.backup');
const certificate = makeServerCertificate(work, 'web', ['web.example.com']);
const machineId = `backup-${randomBytes(2).toString('hex')}`;
const service = `web-${randomBytes(2).toString('hex')}`;
const stops: (() => Promise<void>)[] = [];
t.teardown(async () => {
  for (const stop of stops.reverse()) await stop();
  await registry.stop();
  await engine.stop();
  rmSync(work, { recursive: true, force: true });
});

/** Directory, scheduler, orchestrator (all under --auth token) and an agent on one etcd. */
async function startRoles(etcd: EtcdProcess) {
  const flags = ['--etcd', etcd.url, '--announce-ttl', '3', '--auth', 'token'];
  const roles = await Promise.all([
    serveRole('directory', await freePort(), flags),
    serveRole('scheduler', await freePort(), flags),
    serveRole('orchestrator', await freePort(), flags),
    serveRole('agent', await freePort(), [...flags, '--network', 'host', '--machine-id', machineId, '--stop-grace', '2'], { DOCKER_HOST: engine.dockerHost }),
  ]);
  const stop = () => Promise.all(roles.map((role) => role.stop())).then(() => undefined);
  stops.push(stop);
  return { orchestrator: roles[2]!.url, scheduler: roles[1]!.url, stop };
}

const as = (token: string) => ({ authorization: `Bearer ${token}` });

/** The unit's container as the engine sees it: its id, when it last started, and its release. */
async function container(): Promise<{ id: string; startedAt: string; release: string | undefined }> {
  const info = await engine.docker.getContainer(`${service}-1.service`).inspect();
  return { id: info.Id, startedAt: info.State.StartedAt, release: info.Config.Labels['platform.release'] };
}

async function runningUnit(orchestrator: string, token: string, release: number): Promise<void> {
  await waitFor(
    async () => {
      const reply = await http('GET', `${orchestrator}/services/${service}/units`, undefined, as(token));
      const units = reply.body as { release: number; active: string; sub: string }[];
      return units.length === 1 && units[0]!.release === release && units[0]!.active === 'active' && units[0]!.sub === 'running';
    },
    90_000,
    { what: `${service}-1.service running release ${release}` },
  );
}

const etcdA = await startEtcd();
stops.push(() => etcdA.stop());
let admin = '';
let ci = '';
let lateToken = '';
let before: Awaited<ReturnType<typeof container>> | undefined;

t.test('a deployed platform is backed up at one revision to a 0600 file, leased keys left out', async (t) => {
  const roles = await startRoles(etcdA);
  admin = (await http('POST', `${roles.orchestrator}/tokens/bootstrap`)).body.secret;
  const orch = (method: string, path: string, body?: unknown) => http(method, `${roles.orchestrator}${path}`, body, as(admin));
  t.equal((await orch('POST', '/services', { name: service, description: 'backed up', containerRepository: `${registry.host}/${repository}` })).status, 201);
  t.match(await orch('POST', `/services/${service}/deploy`, { containerRepository: v1.reference }), { status: 200, body: { release: 'v1' } });
  await runningUnit(roles.orchestrator, admin, 1);
  t.match(await orch('POST', `/services/${service}/deploy`, { containerRepository: v2.reference }), { status: 200, body: { release: 'v2' } });
  await runningUnit(roles.orchestrator, admin, 2);
  const made = await orch('POST', '/tokens', { name: 'ci', role: 'read' });
  t.equal(made.status, 201);
  ci = made.body.secret;
  t.equal((await orch('PUT', `/registries/${registry.host}`, { username: 'robot', password: 'hunter2-registry' })).status, 200);
  const cert = { host: 'web.example.com', certificate: readFileSync(certificate.cert, 'utf8'), key: readFileSync(certificate.key, 'utf8') };
  t.equal((await orch('POST', '/certificates', cert)).status, 201);
  // Settled, so the backup holds no deployment in flight and the embedded round trip below compares entries as they are.
  await waitFor(async () => {
    const deployments = (await http('GET', `${roles.scheduler}/deployments?service=${service}`, undefined, as(admin))).body as { state: string }[];
    return deployments.length === 2 && deployments.every((deployment) => deployment.state === 'succeeded');
  }, 30_000, { what: 'both deployments succeeded' });
  // The new container takes the unit's name once the old one is gone.
  before = await waitFor(async () => ((await container()).release === '2' ? container() : undefined), 30_000, { what: 'v2 holding the unit name' });

  const created = await platform('backup', 'create', '--etcd', etcdA.url, '--out', backupFile);
  t.equal(created.code, 0, created.stderr);
  const summary = `^backup of \\d+ keys at revision \\d+ written to ${backupFile} \\([\\d.]+ kB, sha256 [0-9a-f]{64}\\); `;
  t.match(created.stdout, new RegExp(`${summary}[1-9]\\d* leased keys of live processes left out\\n$`));
  t.equal(statSync(backupFile).mode & 0o777, 0o600, 'the file is readable by its owner only');
  const { manifest, entries } = decodeBackup(readFileSync(backupFile, 'utf8'));
  t.equal(manifest.keyCount, entries.length);
  t.ok(entries.some((entry) => entry.key.startsWith(releasePrefix(service))), 'releases are in it');
  t.ok(entries.some((entry) => entry.key === `${ROOT}machines/${machineId}`), 'the machine registration is, to be restored under a grace lease');
  t.notOk(entries.some((entry) => entry.key.startsWith(`${ROOT}unit-status/`)), 'unit statuses are not');
  t.notOk(entries.some((entry) => entry.key === `${ROOT}services/orchestrator`), 'nor announcements');

  const late = await orch('POST', '/tokens', { name: 'late', role: 'read' });
  t.equal(late.status, 201);
  lateToken = late.body.secret;
  await roles.stop();
});

t.test('verify accepts the backup: every record is checked or named as having no schema', async (t) => {
  const verified = await platform('backup', 'verify', backupFile);
  t.equal(verified.code, 0, verified.stderr);
  t.comment(verified.stdout);
  const counts = new RegExp(
    String.raw`^.*: backup of (\d+) keys .*checksum good, restores into a scratch store, (\d+) records match their schemas` +
      String.raw`(?:, (\d+) have no schema to check \(.+\))?\n$`,
  ).exec(verified.stdout);
  t.ok(counts, verified.stdout);
  const [, keys, checked, unchecked] = counts ?? [];
  t.equal(Number(checked) + Number(unchecked ?? 0), Number(keys), 'each key is either checked or named');
  t.ok(Number(checked) > 10, 'services, releases, deployments, journal, assignments, tokens, logins, certificates are checked');
});

t.test('verify refuses a backup with a record that breaks its schema, naming it, with exit 1', async (t) => {
  const text = readFileSync(backupFile, 'utf8');
  const { manifest, entries } = decodeBackup(text);
  const broken = entries.map((entry) => (entry.key === `${ROOT}tokens/ci` ? { ...entry, value: entry.value.replace('"read"', '"owner"') } : entry));
  const file = join(work, 'broken.backup');
  await writePrivateFile(file, encodeBackup(broken, manifest).text);
  const verified = await platform('backup', 'verify', file);
  t.equal(verified.code, 1);
  t.match(verified.stderr, `record ${ROOT}tokens/ci (tokens) does not match its schema: /role`);
});

t.test('after etcd is destroyed, a restore onto a new etcd brings everything back and the unit is adopted, not restarted', async (t) => {
  await etcdA.stop();
  rmSync(etcdA.dataDir, { recursive: true, force: true });
  const etcdB = await startEtcd();
  stops.push(() => etcdB.stop());
  const restored = await platform('backup', 'restore', backupFile, '--etcd', etcdB.url);
  t.equal(restored.code, 0, restored.stderr);
  t.match(restored.stdout, new RegExp(`^restored \\d+ keys from ${backupFile} \\(revision \\d+ of .*\\) into etcd ${etcdB.url}\\n`));
  t.match(restored.stdout, /below the backup's \d+: start \(or restart\) every role on it now/, 'a new etcd starts at a lower revision; the operator is told');
  const again = await platform('backup', 'restore', backupFile, '--etcd', etcdB.url);
  t.equal(again.code, 1, 'a second restore into the now full store is refused');
  t.match(again.stderr, new RegExp(`the store \\(etcd ${etcdB.url}\\) is not empty: it holds \\d+ keys under /platform/ .* give --force`));

  const reader = new EtcdStore([etcdB.url]);
  const machine = await reader.get(`${ROOT}machines/${machineId}`);
  await reader.close();
  t.ok(machine?.lease, 'the machine is back under a lease nobody renews: a grace for its agent, which replaces it');

  const roles = await startRoles(etcdB);
  await runningUnit(roles.orchestrator, admin, 2);
  t.same(await container(), before, 'the same container, never restarted');
  const orch = (path: string, token = admin) => http('GET', `${roles.orchestrator}${path}`, undefined, as(token));
  t.match((await orch(`/services/${service}`)).body, { name: service, description: 'backed up' });
  const history = (await orch(`/services/${service}/config/history`)).body as { version: number; digest: string }[];
  t.same(history.map((release) => [release.version, release.digest]), [[1, v1.digest], [2, v2.digest]], 'the releases');
  t.same(((await orch('/tokens')).body as { name: string }[]).map((token) => token.name).sort(), ['bootstrap', 'ci']);
  t.match((await orch('/registries')).body, [{ host: registry.host, username: 'robot' }]);
  t.match((await orch('/certificates')).body, [{ host: 'web.example.com', certificate: { source: 'operator', names: ['web.example.com'] } }]);
  t.equal((await orch('/services', ci)).status, 200, 'a token made before the backup authenticates');
  const late = await orch('/services', lateToken);
  t.equal(late.status, 401, 'one made after it does not');
  t.match(late.body.message, /unknown or revoked/);
  await roles.stop();
});

t.test('the embedded store: restore, back up again, destroy, restore; a role on it knows the old token only', async (t) => {
  const first = join(work, 'embedded-1');
  t.equal((await platform('backup', 'create', '--data-dir', join(work, 'nowhere'), '--out', join(work, 'x'))).code, 1, 'no store at --data-dir: refused');
  const restored = await platform('backup', 'restore', backupFile, '--data-dir', first);
  t.equal(restored.code, 0, restored.stderr);
  const again = join(work, 'embedded.backup');
  const created = await platform('backup', 'create', '--data-dir', first, '--out', again);
  t.equal(created.code, 0, created.stderr);
  t.match(created.stdout, /; 0 leased keys of live processes left out/);
  // The embedded store drops leased keys when it opens: the restored machine's grace lease too.
  const unleased = decodeBackup(readFileSync(backupFile, 'utf8')).entries.filter((entry) => !entry.key.startsWith(`${ROOT}machines/`));
  t.same(decodeBackup(readFileSync(again, 'utf8')).entries, unleased, 'the same entries but the machine, byte for byte');
  rmSync(first, { recursive: true, force: true });

  const second = join(work, 'embedded-2');
  t.equal((await platform('backup', 'restore', again, '--data-dir', second)).code, 0);
  const refused = await platform('backup', 'restore', again, '--data-dir', second);
  t.equal(refused.code, 1);
  t.match(refused.stderr, `the store (embedded ${second}) is not empty`);
  const forced = await platform('backup', 'restore', again, '--data-dir', second, '--force');
  t.equal(forced.code, 0, forced.stderr);
  t.match(forced.stdout, /after deleting the \d+ keys it held/);

  const directory = await serveRole('directory', await freePort(), ['--data-dir', second, '--auth', 'token']);
  stops.push(() => directory.stop());
  t.match((await http('GET', `${directory.url}/services/${service}`, undefined, as(ci))), { status: 200, body: { name: service } });
  t.equal((await http('GET', `${directory.url}/services/${service}`, undefined, as(lateToken))).status, 401);
  const busy = await platform('backup', 'create', '--data-dir', second, '--out', join(work, 'busy.backup'));
  t.equal(busy.code, 1, 'a running role holds the embedded store');
  t.match(busy.stderr, /the data directory is already in use by process \d+/);
  await directory.stop();

  const store = await EmbeddedStore.open(second);
  t.teardown(() => store.close());
  t.equal((await store.list(releasePrefix(service))).length, 2, 'both releases');
});
