import t from 'tap';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readdirSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { PassThrough } from 'node:stream';
import { startEtcd } from '../harness/etcd.js';
import { startDockerd } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { http, platformBin, serveRole, waitHealthy } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';
import { followLog } from '../../src/roles/agent/log-follower.js';

// Bounded unit output on real parts: a unit writing 50 MB leaves at most the agent's default
// rotation (10 MB x 3) in the test engine's data root, and `platform logs -f`, started before
// the output, keeps following through every rotation to the lines written after it, each line
// once and in order. How much it reads of the 50 MB depends on how far it is behind the unit when
// a file rotates (Docker 20.10's follower then skips the unread rest of that file), so that is
// reported, not asserted.

const LOG_BYTES = 50_000_000;
const BOUND = 3 * 10 * 1024 * 1024;
// json-file rotates before a write that would pass max-size: the current file may pass it by one line.
const SLACK = 64 * 1024;

const etcd = await startEtcd();
const engine = await startDockerd();
const registry = await startRegistry();
const image = await buildTestImage(engine.docker, registry.host, `logs/chatty-${randomBytes(3).toString('hex')}`, 'v1', { variant: 'chatty' });
const shakyRepository = `logs/shaky-${randomBytes(3).toString('hex')}`;
const [steady, failing, refused] = await Promise.all([
  buildTestImage(engine.docker, registry.host, shakyRepository, 'steady'),
  buildTestImage(engine.docker, registry.host, shakyRepository, 'failing', { variant: 'failing' }),
  buildTestImage(engine.docker, registry.host, shakyRepository, 'refused', { variant: 'missing-command' }),
]);
const flags = ['--etcd', etcd.url, '--announce-ttl', '3'];
const roles = await Promise.all([
  serveRole('directory', await freePort(), flags),
  serveRole('scheduler', await freePort(), flags),
  serveRole('orchestrator', await freePort(), flags),
  serveRole('agent', await freePort(), [...flags, '--network', 'host', '--machine-id', `logs-${randomBytes(2).toString('hex')}`, '--stop-grace', '1'], { DOCKER_HOST: engine.dockerHost }),
]);
const orchestrator = roles[2]!;
// Deploys need the scheduler announced: the orchestrator is ready once its peers answer.
await waitHealthy(orchestrator.url, orchestrator, 60_000, '/readyz');
let follower: ReturnType<typeof spawn> | undefined;
t.teardown(async () => {
  follower?.kill('SIGKILL');
  await Promise.all(roles.map((role) => role.stop()));
  await registry.stop();
  await engine.stop();
  await etcd.stop();
});

/** `platform <args>` to completion. */
const platform = (...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> =>
  new Promise((resolve) => {
    const child = spawn(process.execPath, [platformBin, ...args], { env: { ...process.env, PLATFORM_ORCHESTRATOR: orchestrator.url }, stdio: ['ignore', 'pipe', 'pipe'] });
    let [stdout, stderr] = ['', ''];
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('close', (code) => resolve({ code: code ?? 1, stdout, stderr }));
  });

/** Bytes of the container's json-file output on disk: the current file and its rotated ones. */
function logBytes(logPath: string): { bytes: number; files: number } {
  const files = readdirSync(dirname(logPath)).filter((name) => name.startsWith(basename(logPath)));
  return { bytes: files.reduce((sum, name) => sum + statSync(join(dirname(logPath), name)).size, 0), files: files.length };
}

t.test('a unit writing 50 MB keeps at most 10 MB x 3 on disk, and logs -f follows across the rotations', async (t) => {
  const created = await http('POST', `${orchestrator.url}/services`, {
    name: 'chatty',
    description: '',
    containerRepository: `${registry.host}/${image.reference.split('/').slice(1).join('/').split(':')[0]}`,
    loadBalanced: true,
    publicFacing: false,
    numInstances: 1,
    ports: [],
    env: { LOG_BYTES: String(LOG_BYTES) },
  });
  t.equal(created.status, 201, JSON.stringify(created.body));
  const deploy = await platform('deploy', 'chatty', '--image', image.reference);
  t.equal(deploy.code, 0, deploy.stderr);

  const [listed] = await engine.docker.listContainers({ filters: { label: ['platform.service=chatty'] } });
  const container = engine.docker.getContainer(listed!.Id);
  const inspected = await container.inspect();
  t.same(inspected.HostConfig.LogConfig, { Type: 'json-file', Config: { 'max-size': '10m', 'max-file': '3' } }, 'docker inspect shows the rotation');

  // Following from the unit's last line (that it waits), before it writes the rest.
  let received = 0;
  let recent = '';
  let partial = '';
  let followerErrors = '';
  const lines = { read: 0, next: 1, gaps: [] as string[], repeated: [] as string[] };
  follower = spawn(process.execPath, [platformBin, 'logs', 'chatty', '1', '-f', '--tail', '1'], { env: { ...process.env, PLATFORM_ORCHESTRATOR: orchestrator.url }, stdio: ['ignore', 'pipe', 'pipe'] });
  follower.stderr!.on('data', (chunk: Buffer) => (followerErrors += chunk.toString()));
  follower.stdout!.on('data', (chunk: Buffer) => {
    received += chunk.length;
    recent = (recent + chunk.toString()).slice(-4096);
    const text = partial + chunk.toString();
    const complete = text.split('\n');
    partial = complete.pop() ?? '';
    for (const line of complete) {
      const number = /^chatter (\d{9}) /.exec(line)?.[1];
      if (!number) continue;
      const n = Number(number);
      if (n < lines.next) lines.repeated.push(`${n} after ${lines.next - 1}`);
      else if (n > lines.next) lines.gaps.push(`${lines.next}-${n - 1}`);
      lines.read += 1;
      lines.next = n + 1;
    }
  });
  await waitFor(() => recent.includes('waiting for /tmp/chatter\n'), 60_000, { what: `the follower to attach (stderr: ${followerErrors})` });

  const exec = await container.exec({ Cmd: ['touch', '/tmp/chatter'] });
  await exec.start({});
  let peak = 0;
  await waitFor(
    () => {
      peak = Math.max(peak, logBytes(inspected.LogPath).bytes);
      return /\ntick 3\n/.test(recent);
    },
    240_000,
    { intervalMs: 200, what: 'the follower to read past the 50 MB to "tick 3"' },
  ).catch(async (error: unknown) => {
    // Where it stopped: what the follower read last, and whether the unit still runs the same container.
    const state = await container.inspect().then((now) => `${now.Id.slice(0, 12)} running=${now.State.Running} restarts=${now.RestartCount}`, (e: Error) => e.message);
    t.comment(`follower read ${received} bytes, ${lines.read} lines, gaps ${lines.gaps.join(', ')}; last: ${JSON.stringify(recent.slice(-300))}; stderr: ${followerErrors}; container ${state}; on disk ${JSON.stringify(logBytes(inspected.LogPath))}`);
    throw error;
  });
  t.ok(recent.includes('\nchatter done\n'), 'the follower read the line after the 50 MB');
  // A reader behind the writer at a rotation misses the rest of that file (Docker 20.10's follower).
  t.comment(`read ${lines.read} of ${LOG_BYTES / 100} lines; rotated away before they were read: ${lines.gaps.join(', ') || 'none'}`);
  t.same(lines.repeated, [], 'no line twice or out of order (Docker 20.10 re-reads a rotated file; the agent drops what it passed already)');
  t.equal(lines.next - 1, LOG_BYTES / 100, 'and the last line of the 50 MB, after every rotation');
  t.ok(lines.read > 0, `${lines.read} chatter lines (${(received / 1e6).toFixed(1)} MB) read as they came`);

  const onDisk = logBytes(inspected.LogPath);
  t.ok(onDisk.files <= 3, `${onDisk.files} files`);
  t.ok(onDisk.bytes <= BOUND + SLACK, `${(onDisk.bytes / 1e6).toFixed(1)} MB on disk at the end`);
  t.ok(peak <= BOUND + SLACK, `${(peak / 1e6).toFixed(1)} MB on disk at most while it wrote`);

  // The tail still reads through the engine after rotations.
  const tail = await platform('logs', 'chatty', '1', '--tail', '2');
  t.match(tail.stdout, /^tick \d+\ntick \d+\n$/, 'a later tail reads the newest lines');
});

t.test("a follower that stops delivering is replaced: the log goes on from its newest line, each line once", async (t) => {
  // Docker 20.10's follower sometimes stops while the unit writes on (log-follower.ts): stood in
  // for here by a stream that never delivers. The agent's follower asks the engine again after the
  // silence, and again whenever a check finds nothing new (every 150 ms against ticks every 200 ms),
  // each time from the newest line it passed.
  const [listed] = await engine.docker.listContainers({ filters: { label: ['platform.service=chatty'] } });
  const container = engine.docker.getContainer(listed!.Id);
  const stalled = new PassThrough();
  const followed = followLog(engine.docker, container, stalled, { silenceMs: 150, maxSilenceMs: 150 });
  let text = '';
  followed.text.on('data', (chunk: Buffer) => (text += chunk.toString()));
  await new Promise((resolve) => setTimeout(resolve, 3_000));
  followed.close();
  const ticks = [...text.matchAll(/^tick (\d+)$/gm)].map((match) => Number(match[1]));
  t.ok(ticks.length >= 8, `${ticks.length} ticks in 3 s though the first follower delivered nothing`);
  t.same(
    ticks.filter((tick, i) => i > 0 && tick !== ticks[i - 1]! + 1),
    [],
    `each tick once and in order across the asks: ${ticks.join(' ')}`,
  );
});

t.test('a failed unit\'s last 100 lines outlive its container: platform logs NAME N --previous after the deploy reverts', async (t) => {
  t.match(await platform('create', 'shaky', '--image', `${registry.host}/${shakyRepository}`), { code: 0 });
  t.teardown(() => platform('delete', 'shaky'));
  t.equal((await platform('logs', 'shaky', '1', '--previous')).code, 1, 'nothing kept before any failure');
  t.match(await platform('deploy', 'shaky', '--image', steady.reference), { code: 0 });

  const failed = await platform('deploy', 'shaky', '--image', failing.reference);
  t.not(failed.code, 0, `the deploy of the failing image fails: ${failed.stderr}`);
  await waitFor(
    async () => (await engine.docker.listContainers({ all: true, filters: { label: ['platform.service=shaky'] } })).every((c) => c.Labels['platform.release'] === '1'),
    60_000,
    { what: 'the failed containers to be removed by the revert' },
  );

  const previous = await platform('logs', 'shaky', '1', '--previous');
  t.equal(previous.code, 0, previous.stderr);
  const [header, ...lines] = previous.stdout.trimEnd().split('\n');
  t.match(header, /^-- previous run of shaky-1\.service: exited with code 3 at \S+; deployment \S+, release v2, machine \S+, container [0-9a-f]{12}; its last 100 lines \(older output cut\) --$/);
  t.equal(lines.length, 100, 'the last 100 lines');
  t.match(lines[0], /failing line 22$/, 'from the 22nd of 121');
  t.match(lines[38], /failing line 60$/);
  t.match(lines[39], /shaky-1\.service halfway$/, 'stderr too, in order');
  t.match(lines.at(-1), /failing line 120$/);

  const tail = await platform('logs', 'shaky', '1', '--previous', '--tail', '2');
  t.match(tail.stdout, /its last 2 lines.*\n.*failing line 119\n.*failing line 120\n$/);
  t.match(await platform('logs', 'shaky', '1', '--previous', '-f'), { code: 1, stderr: /previous and follow cannot be combined/ });
  t.match(await platform('logs', 'shaky', '2', '--previous'), { code: 1, stderr: /404: no failed run of shaky-2\.service is kept/ });
});

t.test("a unit the engine refuses to start keeps the engine's error as its last output: --previous and the deployment's failure name it", async (t) => {
  t.match(await platform('create', 'nope', '--image', `${registry.host}/${shakyRepository}`), { code: 0 });
  t.teardown(() => platform('delete', 'nope'));
  t.match(await platform('deploy', 'nope', '--image', steady.reference), { code: 0 });

  const failed = await platform('deploy', 'nope', '--image', refused.reference);
  t.not(failed.code, 0, 'the deploy of an image whose command does not exist fails');
  t.match(failed.stdout + failed.stderr, /exec: "nope": executable file not found/, `the deployment's failure names the engine's error: ${failed.stdout}${failed.stderr}`);

  const previous = await platform('logs', 'nope', '1', '--previous');
  t.equal(previous.code, 0, previous.stderr);
  const [header, ...lines] = previous.stdout.trimEnd().split('\n');
  t.match(header, /^-- previous run of nope-1\.service: (container )?failed to start: .*executable file not found.* at \S+; deployment \S+, release v2, machine \S+, container [0-9a-f]{12}; its last 1 lines --$/);
  t.equal(lines.length, 1, 'the program wrote nothing: one line, the engine\'s');
  t.match(lines[0], /^\S+ \[engine\] .*exec: "nope": executable file not found/, 'marked as the engine\'s, not the program\'s');
});
