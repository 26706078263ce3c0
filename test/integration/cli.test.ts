import t from 'tap';
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { startEtcd } from '../harness/etcd.js';
import { startDockerd } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { platformBin, serveRole } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';

// The client commands of the `platform` binary, run as an operator runs them, against every role
// on a real etcd, Docker engine and registry: create, deploy, units, env, scale, deployments,
// rollback, logs, journal, machines, drain, undrain, delete, and what they say when they fail.

const etcd = await startEtcd();
const engine = await startDockerd();
const registry = await startRegistry();
const repository = `cli/shop-${randomBytes(3).toString('hex')}`;
const v1 = await buildTestImage(engine.docker, registry.host, repository, 'v1', { label: 'one' });
const flags = ['--etcd', etcd.url, '--announce-ttl', '3'];
const machineId = `cli-${randomBytes(2).toString('hex')}`;
const roles = await Promise.all([
  serveRole('directory', await freePort(), flags),
  serveRole('scheduler', await freePort(), flags),
  serveRole('orchestrator', await freePort(), flags),
  serveRole('agent', await freePort(), [...flags, '--network', 'host', '--machine-id', machineId, '--stop-grace', '2'], { DOCKER_HOST: engine.dockerHost }),
]);
const orchestrator = roles[2]!;
t.teardown(async () => {
  await Promise.all(roles.map((role) => role.stop()));
  await registry.stop();
  await engine.stop();
  await etcd.stop();
});

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** `platform <args>` against the orchestrator, to completion. */
const platform = (...args: string[]): Promise<Run> =>
  new Promise((resolve) => {
    execFile(process.execPath, [platformBin, ...args], { env: { ...process.env, PLATFORM_ORCHESTRATOR: orchestrator.url }, timeout: 120_000 }, (error, stdout, stderr) => {
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

t.test('a service from create to delete, with the client commands', async (t) => {
  const created = await platform('create', 'shop', '--image', `${registry.host}/${repository}`, '--instances', '2', '--env', 'GREETING=hello');
  t.match(created, { code: 0, stdout: /^created shop \(/ });

  const deployed = await platform('deploy', 'shop', '--image', v1.reference);
  t.match(deployed, { code: 0, stdout: /v1.*\(deployment [0-9a-z-]+\)/ });
  const units = await runningUnits(2, 'v1');
  t.same(units.map(([unit, machine]) => [unit, machine]), [['shop-1.service', machineId], ['shop-2.service', machineId]], 'platform units lists both, on this machine');

  const env = await platform('env', 'shop', 'GREETING=changed', 'EXTRA=1');
  t.same(rows(env), [['GREETING', 'changed'], ['EXTRA', '1']], 'env prints the next config');

  const scaled = await platform('scale', 'shop', '3');
  t.match(scaled, { code: 0, stdout: /deployment/ });
  await runningUnits(3, 'v2');
  t.pass('scale 3 deployed the next config (with the env change) as v2 on 3 units');

  const rolledBack = await platform('rollback', 'shop', 'v1');
  t.match(rolledBack, { code: 0, stdout: /v3/ });
  await runningUnits(2, 'v3');
  t.pass('rollback v1 runs v1 again as v3, with its 2 units');

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
  t.match(machines.find(([id]) => id === machineId), [machineId, /:/, /\d/, '2', '-'], 'machines lists this one, not drained');
  t.match(await platform('drain', machineId, '--reason', 'cli test'), { code: 0, stdout: new RegExp(`^draining ${machineId} since `) });
  t.match(rows(await platform('machines')).find(([id]) => id === machineId)?.[4], /^since /, 'the DRAIN column shows it');
  t.match(await platform('undrain', machineId), { code: 0, stdout: `${machineId} takes new units again\n` });

  t.match(await platform('delete', 'shop'), { code: 0, stdout: 'deleted shop\n' });
  t.same(rows(await platform('units', 'shop')), [], 'no unit is left');
});

t.test('scaling a service that was never deployed only sets the number for its next deploy', async (t) => {
  t.match(await platform('create', 'idle', '--image', `${registry.host}/${repository}`), { code: 0 });
  t.match(await platform('scale', 'idle', '4'), { code: 0, stdout: 'idle will run 4 units from its next deploy (it runs nothing now)\n' });
  t.same(rows(await platform('services')).find(([name]) => name === 'idle')?.[2], '4');
  t.same(rows(await platform('deployments', 'idle')), [], 'nothing was deployed');
  t.match(await platform('delete', 'idle'), { code: 0 });
});

t.test('failures say what is wrong and exit non-zero', async (t) => {
  t.match(await platform('scale', 'nope', '2'), { code: 1, stderr: /^platform: 404: .*nope/ }, 'an unknown service');
  t.match(await platform('scale', 'shop', 'lots'), { code: 1, stderr: /'lots' is invalid for argument 'instances'\. a whole number is needed/ }, 'a number that is not one');
  t.match(await platform('rollback', 'nope', 'v1'), { code: 1, stderr: /^platform: 404: / });
  t.match(await platform('logs', 'nope', '1'), { code: 1, stderr: /^platform: 404: service nope has no unit nope-1\.service/ });
  t.match(await platform('drain', 'bad!id'), { code: 1, stderr: /^platform: 400: .*id/ });
  t.match(await platform('--orchestrator', 'http://127.0.0.1:1', 'deployments'), { code: 1, stderr: /^platform: orchestrator at http:\/\/127\.0\.0\.1:1 is not answering/ });
});
