import t from 'tap';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { startEtcd } from '../harness/etcd.js';
import { startDockerd } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { http, platformBin, runCli, serveRole, waitHealthy } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';

// Jobs on real etcd, Docker and a registry (issue 32 items 1 and 2): `platform run` runs a command
// in a container of the service's release with its env, prints its output and exits with its exit
// code; Ctrl-C stops the container; jobs are listed and their output read back with `platform logs
// --job`. A release command runs once before a deploy replaces any unit: one that writes a marker
// into the service's volume is seen by the units it rolls; one that exits 3 fails the deployment
// with its last lines and leaves the running unit alone; a rollback runs it again only when asked.
// Two schedulers run: a job started or stopped through the follower is the leader's work, handed over.

const etcd = await startEtcd();
const engine = await startDockerd();
const registry = await startRegistry();
const repository = `jobs/app-${randomBytes(3).toString('hex')}`;
const [first, second] = await Promise.all([
  buildTestImage(engine.docker, registry.host, repository, 'v1'),
  buildTestImage(engine.docker, registry.host, repository, 'v2', { label: 'second' }),
]);
const flags = ['--etcd', etcd.url, '--announce-ttl', '3'];
const machine = `jobs-${randomBytes(2).toString('hex')}`;
const roles = await Promise.all([
  serveRole('directory', await freePort(), flags),
  serveRole('scheduler', await freePort(), flags),
  serveRole('orchestrator', await freePort(), flags),
  serveRole('agent', await freePort(), [...flags, '--network', 'host', '--machine-id', machine, '--stop-grace', '1'], { DOCKER_HOST: engine.dockerHost }),
  // A second scheduler: one of the two follows, and job calls that reach it are handed to the leader.
  serveRole('scheduler', await freePort(), flags),
]);
const orchestrator = roles[2]!;
await waitHealthy(orchestrator.url, orchestrator, 60_000, '/readyz');
t.teardown(async () => {
  await Promise.all(roles.map((role) => role.stop()));
  await registry.stop();
  await engine.stop();
  await etcd.stop();
});

const api = (method: string, path: string, body?: unknown) => http(method, `${orchestrator.url}${path}`, body);
const cli = (...args: string[]) => runCli(orchestrator.url, args);
const jobContainers = async () => engine.docker.listContainers({ all: true, filters: { label: ['platform.job'] } });

async function declare(name: string, extra: Record<string, unknown> = {}): Promise<void> {
  const declaration = { name, description: '', containerRepository: `${registry.host}/${repository}`, loadBalanced: true, publicFacing: false, numInstances: 1, ports: [] };
  const created = await api('POST', '/services', { ...declaration, ...extra });
  if (created.status !== 201) throw new Error(JSON.stringify(created.body));
}

t.test('platform run prints the env value and exits with the command\'s code; jobs lists it, logs --job reads it', async (t) => {
  await declare('greet', { env: { GREETING: 'hello-from-the-release' } });
  const deploy = await cli('deploy', 'greet', '--image', first.reference);
  t.equal(deploy.code, 0, deploy.stderr);

  const run = await cli('run', 'greet', '--', 'sh', '-c', 'echo $GREETING; echo to-stderr >&2; exit 7');
  t.equal(run.code, 7, `exit code of the command (stderr: ${run.stderr}; agent: ${roles[3]!.output()}; scheduler: ${roles[1]!.output()})`);
  t.match(run.stdout, /^hello-from-the-release\n/m, 'the env value printed');
  t.match(run.stdout, /to-stderr/, 'stderr is passed on too');
  const id = /job (\S+) of greet v1 on /.exec(run.stderr)?.[1];
  t.ok(id, `the job is named on stderr: ${run.stderr}`);

  const jobs = await cli('jobs', 'greet');
  t.equal(jobs.code, 0, jobs.stderr);
  t.match(jobs.stdout, new RegExp(`${id} +greet +run +v1 +${machine} +exited +7 +local`), `listed with its exit code and caller: ${jobs.stdout}`);
  const logs = await cli('logs', 'greet', '--job', id!);
  // stdout and stderr are two pipes: their lines may interleave either way.
  t.same(logs.stdout.split('\n').sort(), ['', 'hello-from-the-release', 'to-stderr'], 'the kept output');
  const journal = await api('GET', '/journal?service=greet');
  const ended = (journal.body as { kind: string; message: string }[]).find((entry) => entry.kind === 'job.ended');
  t.match(ended?.message, new RegExp(`job ${id} \\(sh\\) of v1 on ${machine} for local: exited with code 7`), 'the journal has the job, its caller and its exit');
  t.ok((journal.body as { kind: string }[]).some((entry) => entry.kind === 'job.requested'), 'and the request');
  // The agent removes the container once its end is recorded: the removal may still be under way.
  await waitFor(async () => (await jobContainers()).length === 0, 10_000, { what: 'the job container to be removed once its end is recorded' });
  t.pass('the job container is removed once its end is recorded');
});

t.test('a job started and stopped through the follower scheduler is handed to the leader', async (t) => {
  const schedulers = [roles[1]!, roles[4]!];
  await Promise.all(schedulers.map((scheduler) => waitHealthy(scheduler.url, scheduler)));
  const leads = async (scheduler: { url: string }) => (await http('GET', `${scheduler.url}/healthz`)).body.leader === true;
  await waitFor(async () => (await Promise.all(schedulers.map(leads))).filter(Boolean).length === 1, 30_000, { what: 'one scheduler to lead' });
  const follower = (await leads(schedulers[0]!)) ? schedulers[1]! : schedulers[0]!;
  const started = await http('POST', `${follower.url}/services/greet/jobs`, { command: ['sh', '-c', "trap 'exit 143' TERM; echo waiting; sleep 300 & wait"] });
  t.equal(started.status, 201, `the follower answers with the leader's reply: ${JSON.stringify(started.body)}`);
  t.equal(started.body.machine, machine, 'the job is placed');
  await waitFor(async () => (await api('GET', `/services/greet/jobs/${started.body.id}`)).body.state === 'running', 60_000, { what: 'the handed-off job to run' });
  const stopped = await http('DELETE', `${follower.url}/services/greet/jobs/${started.body.id}`);
  t.equal(stopped.status, 200, `the stop is handed over too: ${JSON.stringify(stopped.body)}`);
  t.ok(stopped.body.stopRequestedAt, 'the stop is asked of the agent');
  await waitFor(async () => (await api('GET', `/services/greet/jobs/${started.body.id}`)).body.state === 'stopped', 30_000, { what: 'the handed-off job to stop' });
  const unknown = await http('DELETE', `${follower.url}/services/greet/jobs/no-such-job`);
  t.equal(unknown.status, 404, 'the leader\'s refusal comes back as it is');
  t.match(unknown.body.message, /service greet has no job no-such-job/);
});

t.test('bad job requests are refused with 400 naming the field', async (t) => {
  const empty = await api('POST', '/services/greet/jobs', { command: [] });
  t.equal(empty.status, 400);
  t.match(empty.body.message, /command/);
  const long = await api('POST', '/services/greet/jobs', { command: Array.from({ length: 300 }, () => 'x') });
  t.equal(long.status, 400);
  t.match(long.body.message, /command/);
  const badTimeout = await api('POST', '/services/greet/jobs', { command: ['true'], timeout: '10x' });
  t.equal(badTimeout.status, 400);
  t.match(badTimeout.body.message, /timeout/);
  const tooLong = await api('POST', '/services/greet/jobs', { command: ['true'], timeout: '48h' });
  t.equal(tooLong.status, 400);
  t.match(tooLong.body.message, /timeout must be at most 24h/);
  const unknownMachine = await api('POST', '/services/greet/jobs', { command: ['true'], machine: 'nowhere' });
  t.equal(unknownMachine.status, 409);
  t.match(unknownMachine.body.message, /job of greet cannot be placed: machine nowhere is not registered/);
  const noRelease = await api('POST', '/services/greet/jobs', { command: ['true'], release: 'v9' });
  t.equal(noRelease.status, 404);
});

/** `platform run ARGS` in the background, once the job has printed its first line (`started`): its output so far and as it comes, and its exit code. */
async function startRun(args: string[]) {
  const child = spawn(process.execPath, [platformBin, 'run', ...args], { env: { ...process.env, PLATFORM_ORCHESTRATOR: orchestrator.url }, stdio: ['ignore', 'pipe', 'pipe'] });
  const output = { stdout: '', stderr: '' };
  child.stdout.on('data', (chunk: Buffer) => (output.stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output.stderr += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('close', resolve));
  await waitFor(() => output.stdout.includes('started\n'), 60_000, { what: "the job's first line" }).catch(async (error: Error) => {
    // What the CLI printed and the jobs as recorded by then, to tell a job not placed from one not started or not followed.
    const jobs = await api('GET', '/jobs?service=greet').catch((failure: Error) => ({ body: failure.message }));
    child.kill('SIGKILL');
    throw new Error(`${error.message}; the CLI printed ${JSON.stringify(output)}; the jobs: ${JSON.stringify(jobs.body)}`);
  });
  return { child, output, exited };
}

t.test('Ctrl-C stops the job: the CLI exits 130 and the container is gone from the engine', async (t) => {
  const { child, output, exited } = await startRun(['greet', '--', 'sh', '-c', "trap 'exit 143' TERM; echo started; sleep 300 & wait"]);
  t.equal((await jobContainers()).length, 1, 'its container runs');
  child.kill('SIGINT');
  t.equal(await exited, 130, `the CLI exits 130 (stderr: ${output.stderr})`);
  t.match(output.stderr, /stopping job/);
  // The run ends when its container has stopped (that is what the CLI waits for); the agent
  // removes the container once it has kept its output, a moment later (CI caught it still there,
  // "Exited (143) Less than a second ago").
  t.ok((await jobContainers()).every((container) => container.State !== 'running'), 'its container has stopped');
  await waitFor(async () => (await jobContainers()).length === 0, 10_000, { what: 'the stopped job container to be removed' });
  t.same(await jobContainers(), [], 'no job container is left on the engine');
  const listed = (await api('GET', '/jobs?service=greet')).body as { state: string; stopRequestedAt?: string }[];
  t.equal(listed[0]?.state, 'stopped');
  t.ok(listed[0]?.stopRequestedAt);
});

t.test('a job whose machine is lost ends failed naming the machine; back, its agent removes the container', async (t) => {
  const doomedId = `doomed-${randomBytes(2).toString('hex')}`;
  const agentFlags = [...flags, '--network', 'host', '--machine-id', doomedId, '--stop-grace', '1'];
  let doomed = await serveRole('agent', await freePort(), agentFlags, { DOCKER_HOST: engine.dockerHost });
  t.teardown(() => doomed.stop());
  await waitFor(async () => ((await api('GET', '/cluster/machines')).body as { id: string }[]).some((m) => m.id === doomedId), 30_000, { what: 'the second machine to register' });
  const { output, exited } = await startRun(['greet', '--machine', doomedId, '--', 'sh', '-c', 'echo started; sleep 300']);
  const id = /job (\S+) of greet v1 on /.exec(output.stderr)?.[1];
  const containerOf = async () => engine.docker.listContainers({ all: true, filters: { label: [`platform.job=${id}`] } });

  // The agent dies; its machine's lease ends (3 s) and healing counts it lost. The container runs on.
  await doomed.stop('SIGKILL');
  const lostAt = Date.now();
  t.equal(await exited, 1, `the CLI exits 1 (stderr: ${output.stderr})`);
  t.ok(Date.now() - lostAt < 20_000, `within 20 s of the loss, not the job's 1 h timeout (${Date.now() - lostAt} ms)`);
  t.match(output.stderr, new RegExp(`job ${id} failed: its machine ${doomedId} was lost`));
  const view = (await api('GET', `/services/greet/jobs/${id}`)).body as { state: string; error?: string; stopRequestedAt?: string };
  t.match(view, { state: 'failed', error: `its machine ${doomedId} was lost` }, 'the job is recorded failed');
  t.ok(view.stopRequestedAt, 'and asked to stop, for the machine to find when it is back');
  t.equal((await containerOf())[0]?.State, 'running', 'its container still runs on the lost machine');
  const kept = await cli('logs', 'greet', '--job', id!);
  t.equal(kept.stdout, 'started\n', 'the output its agent reported is kept');

  // The machine is back: its agent finds the job ended and removes the container, reporting nothing.
  doomed = await serveRole('agent', await freePort(), agentFlags, { DOCKER_HOST: engine.dockerHost });
  await waitFor(async () => (await containerOf()).length === 0, 20_000, { what: "the ended job's container to be removed by its machine's agent" });
  const after = (await api('GET', `/services/greet/jobs/${id}`)).body as { state: string; error?: string };
  t.match(after, { state: 'failed', error: `its machine ${doomedId} was lost` }, 'its record stands');

  // The cases after this one run on the first machine alone.
  await doomed.stop();
  await waitFor(async () => !((await api('GET', '/cluster/machines')).body as { id: string }[]).some((m) => m.id === doomedId), 30_000, { what: 'the second machine to be gone' });
});

/** `platform run` with its stdin fed `input`, to completion. */
async function runWithInput(args: string[], input: string, wrap: (argv: string[]) => string[] = (argv) => argv): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const [program, ...rest] = wrap([process.execPath, platformBin, 'run', ...args]);
  const child = spawn(program!, rest, { env: { ...process.env, PLATFORM_ORCHESTRATOR: orchestrator.url }, stdio: ['pipe', 'pipe', 'pipe'] });
  let [stdout, stderr] = ['', ''];
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('close', resolve));
  // The line is typed once the job is placed (the CLI names it): a person types after the prompt.
  // In a terminal (script(1)), stderr comes through the terminal too: on stdout here.
  await waitFor(() => `${stdout}${stderr}`.includes('platform: job '), 60_000, { what: `the job to be placed (stdout: ${stdout}; stderr: ${stderr})` });
  child.stdin.write(input);
  const code = await exited;
  return { code, stdout, stderr };
}

t.test('platform run -i passes a piped stdin on to the command', async (t) => {
  const run = await runWithInput(['-i', 'greet', '--', 'sh', '-c', 'read line; echo got:$line; exit 4'], 'hello there\n');
  t.equal(run.code, 4, `the command's exit code (stderr: ${run.stderr}; agent: ${roles[3]!.output().slice(-2000)})`);
  t.match(run.stdout, /^got:hello there$/m, 'the command read the line');
  await waitFor(async () => (await jobContainers()).length === 0, 10_000, { what: 'its container to be removed (CI saw it in "Removal In Progress" as the CLI exited)' });
  t.pass('its container is removed');
});

t.test('platform run from a terminal passes what is typed on to the command', async (t) => {
  // script(1) gives the CLI a pseudo-terminal: its stdin is a terminal, and no -i is given.
  const inTerminal = (argv: string[]) => ['script', '--quiet', '--return', '--echo', 'never', '--command', argv.map((arg) => `'${arg.replaceAll("'", "'\\''")}'`).join(' '), '/dev/null'];
  const run = await runWithInput(['greet', '--', 'sh', '-c', 'read line; echo got:$line; exit 4'], 'typed\n', inTerminal);
  t.equal(run.code, 4, `the command's exit code (output: ${run.stdout} ${run.stderr})`);
  t.match(run.stdout, /got:typed/, 'the command read the typed line');
});

t.test('without a terminal or -i the command reads an empty stdin; the stdin route refuses such a job and strangers', async (t) => {
  const run = await runWithInput(['greet', '--', 'sh', '-c', 'if read line; then echo read:$line; else echo empty; fi'], 'not for it\n');
  t.equal(run.code, 0, run.stderr);
  t.match(run.stdout, /^empty$/m, 'an empty stdin');
  const id = /job (\S+) of greet/.exec(run.stderr)?.[1];
  const refused = await fetch(`${orchestrator.url}/services/greet/jobs/${id}/stdin`, { method: 'PUT', headers: { 'content-type': 'application/octet-stream' }, body: 'x' });
  t.equal(refused.status, 409, 'the orchestrator refuses stdin to a job started without it');
  t.match(((await refused.json()) as { message: string }).message, /was not started with stdin/);

  // A job that keeps its stdin: its agent opens it only to whoever shows the job's secret (the orchestrator).
  const started = await api('POST', '/services/greet/jobs', { command: ['sh', '-c', 'read line; echo got:$line'], stdin: true });
  t.equal(started.status, 201);
  t.notOk('stdinSecret' in started.body, 'the API never shows the secret');
  const agent = roles[3]!.url;
  const put = (headers: Record<string, string>) => fetch(`${agent}/jobs/${started.body.id}/stdin`, { method: 'PUT', headers: { 'content-type': 'application/octet-stream', ...headers }, body: 'intruder\n' });
  t.equal((await put({})).status, 401, 'no secret: refused by the agent, even to a local caller');
  t.equal((await put({ 'x-platform-job-stdin-secret': 'guessed' })).status, 403, 'a wrong secret: refused');
  const fed = await fetch(`${orchestrator.url}/services/greet/jobs/${started.body.id}/stdin`, { method: 'PUT', headers: { 'content-type': 'application/octet-stream' }, body: 'through the API\n' });
  t.equal(fed.status, 204, 'the orchestrator passes it on');
  await waitFor(async () => (await api('GET', `/services/greet/jobs/${started.body.id}`)).body.state === 'exited', 60_000, { what: 'the job to end' });
  const output = await cli('logs', 'greet', '--job', started.body.id);
  t.equal(output.stdout, 'got:through the API\n');
  const again = await fetch(`${orchestrator.url}/services/greet/jobs/${started.body.id}/stdin`, { method: 'PUT', headers: { 'content-type': 'application/octet-stream' }, body: 'late\n' });
  t.equal(again.status, 409, 'an ended job takes no more stdin');
});

t.test('a release command runs before the units are replaced; a failing one fails the deployment and rolls nothing', async (t) => {
  await declare('ledger', { volumes: [{ name: 'data', path: '/data' }] });
  const patched = await api('PATCH', '/services/ledger/config/next', {
    releaseCommand: ['sh', '-c', 'echo migrating; echo "migrated by $PLATFORM_RELEASE" > /data/marker; echo done'],
  });
  t.equal(patched.status, 200, JSON.stringify(patched.body));
  const deploy = await cli('deploy', 'ledger', '--image', first.reference);
  t.equal(deploy.code, 0, deploy.stderr);
  const [good] = (await api('GET', '/deployments?service=ledger')).body as { id: string; state: string; releaseCommand?: { state: string; exitCode?: number; lines: string[] } }[];
  t.equal(good?.state, 'succeeded');
  t.same(good?.releaseCommand && { state: good.releaseCommand.state, exitCode: good.releaseCommand.exitCode, lines: good.releaseCommand.lines }, { state: 'exited', exitCode: 0, lines: ['migrating', 'done'] }, 'its output is kept with the deployment');
  const [unit] = await engine.docker.listContainers({ filters: { label: ['platform.service=ledger'] } });
  t.ok(unit, 'the unit runs');
  t.equal(await execText(unit!.Id, ['cat', '/data/marker']), 'migrated by v1\n', 'the unit sees what the release command wrote in its volume');

  const failing = await api('PATCH', '/services/ledger/config/next', { releaseCommand: ['sh', '-c', 'echo step one; sleep 0.2; echo table exists >&2; exit 3'] });
  // The pause orders the two lines: the engine copies stdout and stderr apart (CI saw them swapped).
  t.equal(failing.status, 200);
  const failed = await cli('deploy', 'ledger', '--image', second.reference);
  t.not(failed.code, 0, 'the deploy fails');
  const [bad] = (await api('GET', '/deployments?service=ledger')).body as { state: string; reason?: string }[];
  t.equal(bad?.state, 'failed');
  t.match(bad?.reason, /release command exited with code 3; nothing was rolled; its last lines: step one \| table exists/, `with the command's last lines: ${bad?.reason}`);
  const [still] = await engine.docker.listContainers({ filters: { label: ['platform.service=ledger'] } });
  t.equal(still?.Id, unit!.Id, 'the old unit is untouched');
  t.equal(still?.Labels['platform.release'], '1');
  t.equal(await execText(unit!.Id, ['cat', '/data/marker']), 'migrated by v1\n');
});

t.test('a rollback runs the release command again only with --run-release-command', async (t) => {
  const commands = async () => ((await api('GET', '/jobs?service=ledger')).body as { kind: string }[]).filter((job) => job.kind === 'release-command').length;
  const fixed = await api('PATCH', '/services/ledger/config/next', { releaseCommand: ['sh', '-c', 'echo "v2 by $PLATFORM_RELEASE" >> /data/marker'] });
  t.equal(fixed.status, 200);
  t.equal((await cli('deploy', 'ledger', '--image', second.reference)).code, 0);
  const before = await commands();
  const rollback = await cli('rollback', 'ledger', 'v1');
  t.equal(rollback.code, 0, rollback.stderr);
  t.match(rollback.stdout, /rollback to v1/);
  t.equal(await commands(), before, 'a rollback does not run it');
  // v2 failed, v3 is the fixed command, v4 the rollback to v1: back to v3, with its command.
  const again = await cli('rollback', 'ledger', 'v3', '--run-release-command');
  t.equal(again.code, 0, again.stderr);
  t.equal(await commands(), before + 1, 'unless asked');
});

async function execText(container: string, cmd: string[]): Promise<string> {
  const exec = await engine.docker.getContainer(container).exec({ Cmd: cmd, AttachStdout: true, AttachStderr: true });
  const stream = await exec.start({});
  const chunks: Buffer[] = [];
  await new Promise<void>((resolve) => {
    stream.on('data', (chunk: Buffer) => chunks.push(chunk));
    stream.once('end', resolve);
  });
  // Docker's multiplexed frames: an 8-byte header before each payload.
  const raw = Buffer.concat(chunks);
  const parts: Buffer[] = [];
  for (let at = 0; at + 8 <= raw.length; at += 8 + raw.readUInt32BE(at + 4)) parts.push(raw.subarray(at + 8, at + 8 + raw.readUInt32BE(at + 4)));
  return Buffer.concat(parts).toString();
}
