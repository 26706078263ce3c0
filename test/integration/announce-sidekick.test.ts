import t from 'tap';
import { startEtcdWithReader } from '../harness/etcd.js';
import { freePort } from '../harness/free-port.js';
import { runPlatform, serveRole, type PlatformProcess } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';

// `platform announce`, the <component>-announce.service sidekick, on a real etcd against real
// roles run with --no-announce: the key is there while the component answers at the address,
// gone within the TTL once it stops answering, back when it answers again, and gone at once when
// the sidekick stops. Only the leading scheduler is announced, and a live one takes over.

// Long enough that probes (every TTL/4) do not time out on a loaded test machine.
const TTL = 6;
const { etcd, read } = await startEtcdWithReader(t);
const flags = ['--etcd', etcd.url, '--announce-ttl', String(TTL)];

const sidekick = (component: string, port: number): PlatformProcess =>
  runPlatform(['announce', '--role', component, '--address', `127.0.0.1:${port}`, ...flags], { PLATFORM_LOG_LEVEL: 'info' });

/** Waits until the sidekick has probed and found nothing to announce, then two probes more. */
async function refused(running: PlatformProcess, reason: RegExp): Promise<void> {
  await waitFor(() => /not announcing yet/.test(running.output()), 30_000, { what: 'a failed probe' }).catch(explain(running));
  if (!reason.test(running.output())) throw new Error(`expected ${String(reason)} in:\n${running.output()}`);
  await new Promise((resolve) => setTimeout(resolve, (TTL / 4) * 2000));
}

/** A failed wait, with what the sidekicks said. */
const explain =
  (...processes: PlatformProcess[]) =>
  (error: Error): never => {
    throw new Error(`${error.message}\n${processes.map((running) => running.output()).join('\n')}`);
  };

/** Resolves once `key` is absent, with how long that took. */
async function goneWithin(key: string, timeoutMs: number): Promise<number> {
  const since = Date.now();
  await waitFor(async () => (await read(key)) === null, timeoutMs, { what: `${key} to disappear` });
  return Date.now() - since;
}

t.test('a role run with --no-announce writes no key, nor does PLATFORM_ANNOUNCE=false', async (t) => {
  const byFlag = await serveRole('directory', await freePort(), [...flags, '--no-announce']);
  const byEnv = await serveRole('orchestrator', await freePort(), flags, { PLATFORM_ANNOUNCE: 'false' });
  t.teardown(() => Promise.all([byFlag.stop(), byEnv.stop()]));
  const announced = await serveRole('web', await freePort(), flags);
  t.teardown(() => announced.stop());
  // A role that does announce shows the others had every chance to.
  await waitFor(() => read('/platform/services/web'), 5000);
  t.equal(await read('/platform/services/service-directory'), null);
  t.equal(await read('/platform/services/orchestrator'), null);
});

t.test('the key lives while the component answers, and goes within the TTL once it does not', async (t) => {
  const port = await freePort();
  const directory = await serveRole('directory', port, [...flags, '--no-announce']);
  t.teardown(() => directory.stop('SIGKILL'));
  const announcer = sidekick('service-directory', port);
  t.teardown(() => announcer.stop());
  const key = '/platform/services/service-directory';
  t.equal(await waitFor(() => read(key), 30_000, { what: 'the announcement' }).catch(explain(announcer)), `127.0.0.1:${port}`);

  directory.child.kill('SIGSTOP'); // hung: the process and its socket are there, nothing answers
  const hung = await goneWithin(key, (TTL + 2) * 1000);
  t.ok(hung <= TTL * 1000, `withdrawn ${hung} ms after the component stopped answering (TTL ${TTL} s)`);
  t.equal(announcer.child.exitCode, null, 'the sidekick keeps running');

  directory.child.kill('SIGCONT');
  t.equal(await waitFor(() => read(key), 15_000, { what: 'the announcement again' }).catch(explain(announcer)), `127.0.0.1:${port}`, 'announced again once it answers');

  await directory.stop('SIGKILL');
  const dead = await goneWithin(key, (TTL + 2) * 1000);
  t.ok(dead <= TTL * 1000, `withdrawn ${dead} ms after the component died`);
});

t.test('stopping the sidekick deletes the key at once; a sidekick of a silent address never announces', async (t) => {
  const port = await freePort();
  const web = await serveRole('web', port, [...flags, '--no-announce']);
  t.teardown(() => web.stop());
  const announcer = sidekick('web', port);
  t.teardown(() => announcer.stop());
  await waitFor(() => read('/platform/services/web'), 30_000, { what: 'the announcement' }).catch(explain(announcer));
  await announcer.stop('SIGTERM');
  t.equal(await read('/platform/services/web'), null, 'gone when the sidekick has exited');

  const nobody = sidekick('web', await freePort());
  t.teardown(() => nobody.stop());
  const wrongRole = sidekick('orchestrator', port); // a web role answers there, not an orchestrator
  t.teardown(() => wrongRole.stop());
  await refused(nobody, /did not answer: ECONNREFUSED/);
  await refused(wrongRole, /is not the orchestrator role \(it says role web\)/);
  t.equal(await read('/platform/services/web'), null, 'nothing answers: nothing announced');
  t.equal(await read('/platform/services/orchestrator'), null, 'the wrong role answers: nothing announced');
});

t.test('only the leading scheduler is announced, and the next leader takes over', async (t) => {
  const ports = [await freePort(), await freePort()];
  // --auth token, as the units run it: the sidekick has no token, and a scheduler's /readyz tells
  // such a caller only its status (it was never announced; issue 30 item 3).
  const schedulers = await Promise.all(ports.map((port) => serveRole('scheduler', port, [...flags, '--no-announce', '--auth', 'token'])));
  t.teardown(() => Promise.all(schedulers.map((scheduler) => scheduler.stop())));
  const leaderAddress = () => read('/platform/scheduler/leader').then((value) => (value ? (JSON.parse(value) as { address: string }).address : null));
  const first = await waitFor(leaderAddress, 10_000, { what: 'a leader' });
  t.equal(await read('/platform/services/scheduler'), null, '--no-announce: the leader does not announce itself');

  const sidekicks = ports.map((port) => sidekick('scheduler', port));
  t.teardown(() => Promise.all(sidekicks.map((running) => running.stop())));
  t.equal(await waitFor(() => read('/platform/services/scheduler'), 30_000, { what: 'the announcement' }).catch(explain(...sidekicks)), first, 'the leader is announced');
  await refused(sidekicks[ports.findIndex((port) => first !== `127.0.0.1:${port}`)]!, /this scheduler does not lead/);
  t.equal(await read('/platform/services/scheduler'), first, 'the follower\'s sidekick does not overwrite it');

  const leader = schedulers[ports.findIndex((port) => first === `127.0.0.1:${port}`)]!;
  await leader.stop('SIGTERM');
  const next = await waitFor(async () => {
    const announced = await read('/platform/services/scheduler');
    return announced && announced !== first ? announced : null;
  }, (TTL + 5) * 1000, { what: 'the new leader\'s announcement' });
  t.equal(next, await leaderAddress(), 'the new leader is announced');
});
