import t from 'tap';
import { rmSync } from 'node:fs';
import { startEtcdWithReader } from '../harness/etcd.js';
import { freePort } from '../harness/free-port.js';
import { runPlatform, serveRole } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';

// Announcements under TTL leases on a real etcd: present while the role runs, gone within the
// TTL after kill -9, gone at once after SIGTERM, back after etcd loses everything. The sidekick
// (`platform announce`) has its own file, announce-sidekick.test.ts.

const TTL = 3;
const { etcd, read } = await startEtcdWithReader(t);
const flags = ['--etcd', etcd.url, '--announce-ttl', String(TTL)];

t.test('a role announces host:port, and kill -9 lets the key expire within the TTL', async (t) => {
  const port = await freePort();
  const directory = await serveRole('directory', port, flags);
  t.equal(await waitFor(() => read('/platform/services/service-directory'), 5000), `127.0.0.1:${port}`);
  await directory.stop('SIGKILL');
  const killedAt = Date.now();
  await waitFor(async () => (await read('/platform/services/service-directory')) === null, (TTL + 3) * 1000);
  t.ok(Date.now() - killedAt <= (TTL + 2) * 1000, `gone ${Date.now() - killedAt} ms after kill -9`);
});

t.test('SIGTERM revokes the lease: the key is gone at once', async (t) => {
  const port = await freePort();
  const scheduler = await serveRole('scheduler', port, flags);
  t.equal(await waitFor(() => read('/platform/services/scheduler'), 5000), `127.0.0.1:${port}`);
  await scheduler.stop('SIGTERM');
  t.equal(await read('/platform/services/scheduler'), null, 'gone when the process has exited');
});

t.test('--advertise names the announced address', async (t) => {
  const port = await freePort();
  const orchestrator = await serveRole('orchestrator', port, [...flags, '--advertise', 'orchestrator.internal:9000']);
  t.equal(await waitFor(() => read('/platform/services/orchestrator'), 5000), 'orchestrator.internal:9000');
  await orchestrator.stop();
});

t.test('after etcd restarts, and even after it lost its data, the announcement comes back', async (t) => {
  const port = await freePort();
  const directory = await serveRole('directory', port, flags);
  t.teardown(() => directory.stop());
  await waitFor(() => read('/platform/services/service-directory'), 5000);
  await etcd.restart();
  t.equal(await waitFor(() => read('/platform/services/service-directory'), 15_000), `127.0.0.1:${port}`, 'present after a restart');
  await etcd.stop();
  rmSync(etcd.dataDir, { recursive: true, force: true });
  await etcd.restart();
  t.equal(await waitFor(() => read('/platform/services/service-directory'), 20_000), `127.0.0.1:${port}`, 'rewritten into an empty etcd');
});

t.test('platform announce refuses a role that is not a component', async (t) => {
  const refused = runPlatform(['announce', '--role', 'nope', '--address', '127.0.0.1:1', '--etcd', etcd.url]);
  const code = await new Promise((resolve) => refused.child.once('exit', resolve));
  t.equal(code, 2);
  t.match(refused.output(), /--role must be one of/);
});
