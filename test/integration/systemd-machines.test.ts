import t from 'tap';
import { existsSync, readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { startMachineNetwork } from '../harness/systemd-machines.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { waitFor } from '../harness/wait.js';

// Issue 30 item 1: the test machines (test/harness/systemd-machines.ts). One machine, booted
// twice (the reboot): systemd runs as its PID 1, its Docker engine runs a unit image from the
// test registry with its memory and CPU limits enforced, `systemctl reboot` brings it back with its files,
// and nothing it made is left afterwards. Its boot times are printed (docs/test-machines.md).

const network = await startMachineNetwork();
let stopped = false;
const registry = await startRegistry({ address: network.bridgeAddress }).catch(async (error: unknown) => {
  await network.stop();
  throw error;
});
t.teardown(async () => {
  await registry.stop();
  if (!stopped) await network.stop();
});
const machine = await network.boot();
t.comment(`machine base: ${network.base.builtSeconds === undefined ? 'from the cache' : `built in ${network.base.builtSeconds.toFixed(0)} s`} (${network.base.path})`);
t.comment(`first boot: ${machine.bootSeconds[0]!.toFixed(1)} s`);

t.test('systemd is the machine\'s PID 1 and every unit started', async (t) => {
  // running, not degraded: a failed unit names what the machine lacks.
  t.equal(machine.systemState, 'running', `is-system-running (failed units: ${machine.failedUnits.join(', ') || 'none'})`);
  t.equal((await machine.sh('cat /proc/1/comm')).trim(), 'systemd');
  t.equal((await machine.sh('hostname')).trim(), machine.name);
  t.match(await machine.sh('ip -4 -o addr show host0'), ` ${machine.address}/24 `, 'its own address on the bridge');
  t.equal((await machine.sh('systemctl is-active docker')).trim(), 'active');
  t.match(await machine.sh('platform version --client'), /^platform \d+\.\d+\.\d+/, 'the platform built here, run by /usr/local/bin/platform');
});

const repository = `machines/web-${randomBytes(3).toString('hex')}`;

t.test('Docker in the machine runs a unit image from the test registry, reached at the machine\'s address', async (t) => {
  const image = await buildTestImage(machine.docker, registry.host, repository, 'v1', { label: 'machine' });
  await machine.docker.getImage(image.reference).remove();
  await machine.sh(`docker pull -q ${image.reference}`);
  const container = await machine.docker.createContainer({
    Image: image.reference,
    Env: ['PORT=8080', 'PLATFORM_UNIT=web-1', 'GREETING=hello'],
    ExposedPorts: { '8080/tcp': {} },
    HostConfig: { PortBindings: { '8080/tcp': [{ HostPort: '8080' }] } },
  });
  await container.start();
  const page = await waitFor(async () => {
    const reply = await fetch(`http://${machine.address}:8080/`);
    return reply.ok ? reply.text() : undefined;
  }, 30_000, { what: 'the unit to answer at the machine\'s address' });
  t.match(page, 'web-1 hello');
  await container.remove({ force: true });
});

t.test('a container\'s memory limit is enforced in the machine', async (t) => {
  const hog = await buildTestImage(machine.docker, registry.host, repository, 'hog', { variant: 'memory-hog' });
  const container = await machine.docker.createContainer({ Image: hog.reference, Env: ['PLATFORM_UNIT=hog-1'], HostConfig: { Memory: 32 * 1024 * 1024, MemorySwap: 32 * 1024 * 1024 } });
  await container.start();
  const state = await waitFor(async () => {
    const { State } = await container.inspect();
    return State.Running ? undefined : State;
  }, 60_000, { what: 'the memory hog to be stopped' });
  t.equal(state.OOMKilled, true, `killed by the kernel at its limit (exit ${state.ExitCode}${state.Error ? `, ${state.Error}` : ''})`);
  await container.remove({ force: true });
});

t.test('a container\'s CPU limit is enforced in the machine', async (t) => {
  // A busy loop takes a whole CPU when nothing holds it back; at half a CPU its cgroup's usage
  // over a few seconds of wall time stays near a half.
  const image = `${registry.host}/${repository}:v1`;
  const container = await machine.docker.createContainer({ Image: image, Cmd: ['/bin/sh', '-c', 'while :; do :; done'], HostConfig: { NanoCpus: 500_000_000 } });
  await container.start();
  const usage = async (): Promise<{ cpu: number; at: bigint }> => {
    const stats = (await container.stats({ stream: false })) as { cpu_stats: { cpu_usage: { total_usage: number } } };
    return { cpu: stats.cpu_stats.cpu_usage.total_usage, at: process.hrtime.bigint() };
  };
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const first = await usage();
  await new Promise((resolve) => setTimeout(resolve, 4000));
  const second = await usage();
  const share = (second.cpu - first.cpu) / Number(second.at - first.at);
  t.comment(`CPU used at --cpus 0.5: ${share.toFixed(2)} of one CPU`);
  t.ok(share > 0.2 && share < 0.6, `the busy loop used ${share.toFixed(2)} of a CPU, held near its 0.5`);
  await container.remove({ force: true });
});

t.test('systemctl reboot: nspawn exits 133 and the machine boots again, its files kept', async (t) => {
  machine.writeFile('/var/lib/reboot-marker', 'before\n');
  await machine.reboot();
  t.comment(`boot after the reboot: ${machine.bootSeconds[1]!.toFixed(1)} s`);
  t.equal(machine.reboots, 1);
  t.equal(machine.systemState, 'running', `is-system-running (failed units: ${machine.failedUnits.join(', ') || 'none'})`);
  t.equal((await machine.sh('cat /var/lib/reboot-marker')).trim(), 'before');
  t.equal((await machine.sh('systemctl is-active docker')).trim(), 'active');
  await machine.docker.ping();
});

t.test('stopping removes the machines, their cgroups and overlays, and the bridge', async (t) => {
  const { bridge, scratch, cgroups } = network.made;
  await network.stop();
  stopped = true;
  t.notOk(existsSync(scratch), 'the machines\' files');
  t.same(cgroups.filter((dir) => existsSync(dir)), [], 'the cgroups');
  t.notMatch(readFileSync('/proc/self/mounts', 'utf8'), scratch, 'the overlays');
  t.notOk(existsSync(`/sys/class/net/${bridge}`), 'the bridge');
});
