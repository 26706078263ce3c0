import t, { type Test } from 'tap';
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { startEtcd } from '../harness/etcd.js';
import { startDockerd } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { http, platformBin, runCli, serveRole, type CliRun as Run } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';

// The client commands of the `platform` binary, run as an operator runs them, against every role
// on a real etcd, Docker engine and registry: create, deploy, units, env, scale, deployments,
// rollback, logs, journal, machines, drain, undrain, delete, and what they say when they fail.

const etcd = await startEtcd();
const engine = await startDockerd();
const registry = await startRegistry();
const repository = `cli/shop-${randomBytes(3).toString('hex')}`;
const v1 = await buildTestImage(engine.docker, registry.host, repository, 'v1', { label: 'one' });
// It fails only after a while, so its deployment is still in flight across several CLI calls
// (three restarts of a unit that runs 4 s take over 20 s, whatever the machine's load).
const broken = await buildTestImage(engine.docker, registry.host, repository, 'broken', { variant: 'slow-crash' });
const flags = ['--etcd', etcd.url, '--announce-ttl', '3'];
const machineId = `cli-${randomBytes(2).toString('hex')}`;
const roles = await Promise.all([
  serveRole('directory', await freePort(), flags),
  serveRole('scheduler', await freePort(), flags),
  serveRole('orchestrator', await freePort(), flags),
  // It takes 5 units (a rolling update of shop's 3 has at most 4 at once): the last test fills it.
  serveRole('agent', await freePort(), [...flags, '--network', 'host', '--machine-id', machineId, '--stop-grace', '2', '--max-units', '5'], { DOCKER_HOST: engine.dockerHost }),
]);
const orchestrator = roles[2]!;
t.teardown(async () => {
  await Promise.all(roles.map((role) => role.stop()));
  await registry.stop();
  await engine.stop();
  await etcd.stop();
});

/** `platform <args>` against the orchestrator, to completion. */
const platform = (...args: string[]) => runCli(orchestrator.url, args);

/** `platform <args>` on a terminal (a pseudo-terminal from util-linux's script), to completion. */
const platformOnTerminal = (...args: string[]): Promise<Run> =>
  new Promise((resolve) => {
    const command = [process.execPath, platformBin, ...args].map((word) => `'${word}'`).join(' ');
    execFile('script', ['-qec', command, '/dev/null'], { env: { ...process.env, PLATFORM_ORCHESTRATOR: orchestrator.url, COLUMNS: '200' }, timeout: 120_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr });
    });
  });

/** Rows of a table the CLI printed, as arrays of cells (header dropped). */
const rows = (run: Run): string[][] =>
  run.stdout
    .trim()
    .split('\n')
    .slice(1)
    .map((line) => line.split(/\s{2,}/));

/** Waits until `platform units shop` lists `count` active/running units of `release`. */
const runningUnits = (count: number, release: string) =>
  waitFor(async () => {
    const units = rows(await platform('units', 'shop'));
    const ready = units.filter(([, , active, sub, unitRelease]) => active === 'active' && sub === 'running' && unitRelease === release);
    return ready.length === count && units.length === count ? units : undefined;
  }, 90_000, { what: `${count} running units of shop ${release}` });

/** `platform status` shows the services, machines and newest deployments the API lists. */
async function statusListsTheApi(t: Test): Promise<void> {
  const status = await platform('status');
  t.equal(status.code, 0);
  const [services, machines, deployments] = status.stdout.split('\n\n').map((section) => rows({ ...status, stdout: section }));
  const api = async (path: string) => (await http('GET', `${orchestrator.url}${path}`)).body as { name?: string; id?: string }[];
  t.same(services!.map(([name]) => name).sort(), (await api('/services')).map((service) => service.name).sort(), 'status lists the services the API lists');
  t.same(services!.find(([name]) => name === 'shop'), ['shop', '2/2', 'v3', 'succeeded (rollback, v3)'], 'with units running of wanted, the release and the last deployment');
  t.same(machines!.map(([id]) => id).sort(), (await api('/cluster/machines')).map((machine) => machine.id).sort(), 'the machines the API lists');
  t.match(machines!.find(([id]) => id === machineId), [machineId, /:/, '2/2', 'ready']);
  t.same(deployments!.map(([id]) => id), (await api('/deployments')).slice(0, deployments!.length).map((deployment) => deployment.id), 'and the newest deployments');
}

t.test('a service from create to delete, with the client commands', async (t) => {
  const created = await platform('create', 'shop', '--image', `${registry.host}/${repository}`, '--instances', '2', '--env', 'GREETING=hello');
  t.match(created, { code: 0, stdout: /^created shop \(/ });

  const deployed = await platform('deploy', 'shop', '--image', v1.reference);
  t.match(deployed, { code: 0, stdout: /v1.*\(deployment [0-9a-z-]+\)/ });
  t.match(deployed.stdout, /\ndeployment [0-9a-z-]+ succeeded: shop v1 runs 2 of 2 units\n$/, 'deploy follows the deployment until it succeeded');
  const progress = deployed.stdout.split('\n').filter((line) => line.startsWith('shop v1'));
  t.ok(progress.length > 0, 'and printed progress lines on the way');
  t.ok(progress.every((line) => /^shop v1 {2}(pending|pulling|rolling|succeeded) {2}[0-2]\/2 ready/.test(line)), `plain lines, one per step:\n${progress.join('\n')}`);
  t.notOk(deployed.stdout.includes('\r') || deployed.stdout.includes('\u001b'), 'with no terminal control codes when stdout is not a terminal');
  const units = rows(await platform('units', 'shop'));
  t.same(
    units.map(([unit, machine, active, sub]) => [unit, machine, active, sub]),
    [['shop-1.service', machineId, 'active', 'running'], ['shop-2.service', machineId, 'active', 'running']],
    'both units run, on this machine, when deploy returns',
  );

  const env = await platform('env', 'shop', 'GREETING=changed', 'EXTRA=1');
  t.same(rows(env), [['GREETING', 'changed'], ['EXTRA', '1']], 'env prints the next config');

  const scaled = await platformOnTerminal('scale', 'shop', '3');
  t.match(scaled, { code: 0, stdout: /succeeded: shop v2 runs 3 of 3 units/ });
  t.ok(scaled.stdout.includes('\r\u001b[2K'), 'on a terminal the progress line is redrawn in place');
  t.match(scaled.stdout, /shop v2 {2}rolling {5}\[#*-*\] [0-3]\/3 ready/, 'with a bar of units ready out of wanted');
  t.match(scaled.stdout, /shop v2 {2}succeeded {3}\[#{20}\] 3\/3 ready/);
  await runningUnits(3, 'v2');
  t.pass('scale 3 deployed the next config (with the env change) as v2 on 3 units');

  const rolledBack = await platform('rollback', 'shop', 'v1');
  t.match(rolledBack, { code: 0, stdout: /succeeded: shop v3 runs 2 of 2 units/ });
  await runningUnits(2, 'v3');
  t.pass('rollback v1 runs v1 again as v3, with its 2 units');
  await statusListsTheApi(t);

  const deployments = rows(await platform('deployments', 'shop'));
  t.same(deployments.slice(0, 3).map(([, service, release]) => [service, release]), [['shop', 'v3'], ['shop', 'v2'], ['shop', 'v1']], 'deployments lists them newest first');
  t.equal(deployments[0]![4], 'rollback', 'with their trigger');

  const logs = await platform('logs', 'shop', '1', '--tail', '20');
  t.match(logs, { code: 0, stdout: /serving shop-1\.service on port/ }, 'logs prints what the unit printed');
  const following = spawn(process.execPath, [platformBin, 'logs', 'shop', 'shop-2.service', '--tail', '5', '-f'], { env: { ...process.env, PLATFORM_ORCHESTRATOR: orchestrator.url } });
  let followed = '';
  following.stdout.on('data', (chunk: Buffer) => (followed += chunk.toString()));
  await waitFor(() => /serving shop-2\.service on port/.test(followed), 20_000, { what: 'logs -f to print the unit output' });
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  t.equal(following.exitCode, null, 'logs -f keeps following after the output so far');
  following.kill('SIGINT');

  const journal = await platform('journal', 'shop', '--limit', '3');
  t.equal(rows(journal).length, 3, 'journal prints the newest entries');
  t.ok(rows(journal).every(([, service]) => service === 'shop'));

  const machines = rows(await platform('machines'));
  t.match(machines.find(([id]) => id === machineId), [machineId, /:/, /\d/, '2/5', /^\d+ MB$/, /^\d/, '-'], 'machines lists this one with its units of the 5 it takes, its memory and CPUs for units, not drained');
  t.match(await platform('drain', machineId, '--reason', 'cli test'), { code: 0, stdout: new RegExp(`^draining ${machineId} since `) });
  t.match(rows(await platform('machines')).find(([id]) => id === machineId)?.[6], /^since /, 'the DRAIN column shows it');
  t.match(await platform('undrain', machineId), { code: 0, stdout: `${machineId} takes new units again\n` });

  t.match(await platform('delete', 'shop'), { code: 0, stdout: 'deleted shop\n' });
  t.same(rows(await platform('units', 'shop')), [], 'no unit is left');
});

t.test('deploy without --image deploys the tag the service runs, never an implied :latest (issue 31)', async (t) => {
  // The declaration names no tag, and the registry holds no :latest of the repository.
  t.match(await platform('create', 'again', '--image', `${registry.host}/${repository}`), { code: 0 });
  const refused = await platform('deploy', 'again');
  t.not(refused.code, 0, 'nothing to deploy yet: no tag declared, no release running');
  t.match(refused.stderr, /containerRepository is needed: .*names no tag and the service runs no release/, 'the answer names the field and the way out');
  t.same(rows(await platform('deployments', 'again')), [], 'and nothing was deployed');

  t.match(await platform('deploy', 'again', '--image', v1.reference), { code: 0, stdout: /succeeded: again v1 runs 1 of 1 units/ });
  const redeployed = await platform('deploy', 'again');
  t.equal(redeployed.code, 0, `deploy again without --image: ${redeployed.stderr}`);
  t.match(redeployed.stdout, /^again already runs this image and config as v1 \(deployment [0-9a-z-]+, succeeded\): \S+@sha256:[0-9a-f]+\n/, 'the tag it runs (v1) is what it runs: unchanged, not a new release of :latest');
  t.equal(redeployed.stdout.split('(deployment ').length, 2, 'the deployment is named once');
  const last = (await http('GET', `${orchestrator.url}/deployments?service=again`)).body as { image: string }[];
  t.equal(last.length, 1, 'still one deployment');
  t.match(await platform('delete', 'again'), { code: 0 });
});

t.test('a deploy of a broken image exits non-zero with the reason; --detach returns at once', async (t) => {
  t.match(await platform('create', 'crashy', '--image', `${registry.host}/${repository}`), { code: 0 });
  const detachedAt = Date.now();
  const detached = await platform('deploy', 'crashy', '--image', broken.reference, '--detach');
  t.match(detached, { code: 0, stdout: /^.*\(deployment ([0-9a-z-]+)\)\n$/ }, 'one line, and exit 0: the deployment was accepted');
  t.ok(Date.now() - detachedAt < 10_000, 'returned without waiting for the deployment');
  const id = /\(deployment ([0-9a-z-]+)\)/.exec(detached.stdout)![1]!;
  const listed = rows(await platform('deployments', 'crashy')).find(([deployment]) => deployment === id);
  t.match(listed?.[3], /^(pending|pulling|rolling)$/, 'the deployment is still in flight');

  const timedOut = await platform('deploy', 'crashy', '--image', broken.reference, '--timeout', '1s');
  t.match(timedOut.stdout, new RegExp(`\\(deployment ${id}, \\w+\\)`), 'the same deploy again names the deployment in flight');
  t.equal(timedOut.stdout.split(`deployment ${id}`).length, 2, 'once');
  t.equal(timedOut.code, 124, '--timeout gives up watching with exit 124');
  t.match(timedOut.stderr, /gave up watching after 1 s; deployment [0-9a-z-]+ is \w+ and it goes on/);
  // Following the same deploy again names the same deployment ("unchanged") and waits for its end.
  const followed = await platform('deploy', 'crashy', '--image', broken.reference);
  t.equal(followed.code, 1, 'a failed deployment exits 1');
  t.match(followed.stderr, new RegExp(`platform: deployment ${id} (failed|reverted): crashy-1\\.service on ${machineId}: .*exited with code 1`), `with the reason: ${followed.stderr}`);
  t.match(followed.stdout, /crashy v1 {2}(rolling|failed|reverted) {2}0\/1 ready/, 'progress lines came first');

  t.match(await platform('deploy', 'crashy', '--timeout', 'soon'), { code: 1, stderr: /a duration is a number and a unit/ }, 'a bad --timeout is refused');
  t.match(await platform('delete', 'crashy'), { code: 0 });
});

t.test('Ctrl-C stops watching, not the deployment', async (t) => {
  t.match(await platform('create', 'patient', '--image', `${registry.host}/${repository}`), { code: 0 });
  const watching = spawn(process.execPath, [platformBin, 'deploy', 'patient', '--image', broken.reference], { env: { ...process.env, PLATFORM_ORCHESTRATOR: orchestrator.url } });
  let stdout = '';
  let stderr = '';
  watching.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  watching.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  await waitFor(() => /^patient v1 {2}\w+ {2}\d\/1 ready/m.test(stdout), 30_000, { what: 'a progress line' });
  const exited = new Promise<number | null>((resolve) => watching.once('exit', (code) => resolve(code)));
  watching.kill('SIGINT');
  t.equal(await exited, 130, 'exit 130');
  t.match(stderr, /stopped watching; deployment [0-9a-z-]+ is \w+ and it goes on: platform deployments patient/);
  const [latest] = rows(await platform('deployments', 'patient'));
  t.match(latest?.[3], /^(pending|pulling|rolling|failed)$/, 'the deployment went on (it fails by itself later)');
  t.match(await platform('delete', 'patient'), { code: 0 });
});

t.test('scaling a service that was never deployed only sets the number for its next deploy', async (t) => {
  // status --watch, started first, redraws when the service appears.
  const watching = spawn(process.execPath, [platformBin, 'status', '--watch'], { env: { ...process.env, PLATFORM_ORCHESTRATOR: orchestrator.url } });
  let screens = '';
  watching.stdout.on('data', (chunk: Buffer) => (screens += chunk.toString()));
  await waitFor(() => screens.startsWith('--- '), 20_000, { what: 'the first screen' });
  t.match(await platform('create', 'idle', '--image', `${registry.host}/${repository}`), { code: 0 });
  await waitFor(() => /\nidle +0\/0 +- +never deployed\n/.test(screens), 20_000, { what: 'status --watch to show the new service' });
  const exited = new Promise<number | null>((resolve) => watching.once('exit', (code) => resolve(code)));
  watching.kill('SIGINT');
  t.equal(await exited, 0, 'status --watch redrew the screen with the new service, and Ctrl-C ends it');

  t.match(await platform('scale', 'idle', '4'), { code: 0, stdout: 'idle will run 4 units from its next deploy (it runs nothing now)\n' });
  t.same(rows(await platform('services')).find(([name]) => name === 'idle')?.[2], '4');
  t.same(rows(await platform('deployments', 'idle')), [], 'nothing was deployed');
  t.match(await platform('delete', 'idle'), { code: 0 });
});

t.test("a machine takes no more units than its agent's --max-units; status shows running of wanted, and placed", async (t) => {
  // Units an earlier test left (when it failed before deleting its service) still take room.
  const used = Number(rows(await platform('machines')).find(([id]) => id === machineId)?.[3]?.split('/')[0]);
  const free = 5 - used;
  const wanted = free + 2;
  t.match(await platform('create', 'wide', '--image', `${registry.host}/${repository}`, '--instances', String(wanted)), { code: 0 });
  const deployed = await platform('deploy', 'wide', '--image', v1.reference);
  t.equal(deployed.code, 1, `the deploy fails: no machine has room for 2 of the ${wanted} units`);
  t.match(deployed.stderr, new RegExp(`wide needs room for 2 more units; no machine qualifies \\(${machineId} is full\\)`), `with the reason: ${deployed.stderr}`);
  t.match(rows(await platform('machines')).find(([id]) => id === machineId)?.[3], '5/5', 'the machine holds the 5 units it takes');
  const units = rows(await platform('units', 'wide'));
  t.equal(units.length, free, 'and no more');
  const status = await waitFor(async () => {
    const run = await platform('status');
    return new RegExp(`\\nwide +${free}/${wanted} \\(placed ${free}\\) +v1 +failed`).test(run.stdout) ? run : undefined;
  }, 30_000, { intervalMs: 1_000, what: `status to show wide ${free}/${wanted} (placed ${free})` });
  t.ok(status, `${free} of the ${wanted} wanted run: status says so, and that only ${free} are placed`);
  t.match(await platform('delete', 'wide'), { code: 0 });
});

t.test('failures say what is wrong and exit non-zero', async (t) => {
  t.match(await platform('scale', 'nope', '2'), { code: 1, stderr: /^platform: 404: .*nope/ }, 'an unknown service');
  t.match(await platform('scale', 'shop', 'lots'), { code: 1, stderr: /'lots' is invalid for argument 'instances'\. a whole number is needed/ }, 'a number that is not one');
  t.match(await platform('rollback', 'nope', 'v1'), { code: 1, stderr: /^platform: 404: / });
  t.match(await platform('logs', 'nope', '1'), { code: 1, stderr: /^platform: 404: service nope has no unit nope-1\.service/ });
  t.match(await platform('drain', 'bad!id'), { code: 1, stderr: /^platform: 400: .*id/ });
  t.match(await platform('--orchestrator', 'http://127.0.0.1:1', 'deployments'), { code: 1, stderr: /^platform: orchestrator at http:\/\/127\.0\.0\.1:1 is not answering/ });
});
