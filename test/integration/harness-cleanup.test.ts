import t from 'tap';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';
import { waitFor } from '../harness/wait.js';
import { reapMachineNetwork } from '../harness/systemd-machines.js';

// A test file that tap ends at its timeout removes what its harness started (DEVELOPERS: "also when
// it fails"). tap sends SIGALRM, then SIGKILL 500 ms later; the harness exits on SIGALRM so its
// 'exit' handlers run (exit-on-signal.test), but an engine's handler removed its running containers
// before it killed dockerd, which took longer than the 500 ms: in a timed-out jobs.test the SIGKILL
// came first, and dockerd and the registry (whose handler came after) were left running.

const fixture = fileURLToPath(new URL('../fixtures/timed-out-engine.js', import.meta.url));
const machinesFixture = fileURLToPath(new URL('../fixtures/timed-out-machines.js', import.meta.url));

/** Runs a fixture: its output as it comes, and its exit. */
function startFixture(path: string) {
  const child = spawn(process.execPath, [path], { stdio: ['ignore', 'pipe', 'pipe'] });
  const output = { stdout: '', stderr: '' };
  child.stdout.on('data', (chunk: Buffer) => (output.stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output.stderr += chunk.toString()));
  const exited = new Promise((resolve) => child.once('exit', resolve));
  return { child, output, exited };
}

/** Waits for the fixture's `ready` line; a timeout or an early exit tells what it printed. */
async function untilReady(fixture: ReturnType<typeof startFixture>, timeoutMs: number, what: string): Promise<string> {
  const { child, output } = fixture;
  await waitFor(() => output.stdout.includes('ready\n') || child.exitCode !== null, timeoutMs, { what }).catch((error: Error) => {
    throw new Error(`${error.message}: ${output.stdout}${output.stderr}`);
  });
  return output.stdout;
}

/** Ends a fixture as tap ends a file at its timeout (@tapjs/core spawn.js): SIGALRM, then SIGKILL 500 ms later. */
async function endAsTapTimeout(fixture: ReturnType<typeof startFixture>): Promise<void> {
  fixture.child.kill('SIGALRM');
  setTimeout(() => fixture.child.kill('SIGKILL'), 500);
  await fixture.exited;
}

/** Whether the process runs (a killed one may stay a zombie: its parent exited and PID 1 here may not reap). */
const alive = (pid: number): boolean => {
  const stat = existsSync(`/proc/${pid}/stat`) ? readFileSync(`/proc/${pid}/stat`, 'utf8') : '';
  return stat !== '' && !/\) [ZX] /.test(stat);
};

const listening = (host: string): Promise<boolean> =>
  new Promise((resolve) => {
    const [address, port] = host.split(':');
    const socket = connect(Number(port), address!, () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });

t.test("a file ended as tap ends it at its timeout leaves no engine, container or registry running", async (t) => {
  const engineFixture = startFixture(fixture);
  const stdout = await untilReady(engineFixture, 120_000, "the fixture's engine, registry and container");
  const [, dockerdPid = '0', engineDir = '/nonexistent'] = /^dockerd (\d+) (\S+)$/m.exec(stdout) ?? [];
  const dockerd = Number(dockerdPid);
  /** Processes of the engine (containerd, shims) name its directory. */
  const ofEngine = () => (spawnSync('pgrep', ['-f', `${engineDir}/`], { encoding: 'utf8' }).stdout ?? '').trim();
  const container = Number(/^container (\d+)$/m.exec(stdout)?.[1]);
  const [, registry = '', registryPid = '0'] = /^registry (\S+) (\d+)$/m.exec(stdout) ?? [];
  t.ok(alive(dockerd) && alive(container) && (await listening(registry)), `all three run: ${stdout}`);

  await endAsTapTimeout(engineFixture);
  try {
    await waitFor(async () => !alive(dockerd) && !alive(container) && ofEngine() === '' && !existsSync(engineDir) && !(await listening(registry)), 30_000, {
      what: 'the engine, its containers, its directory and the registry to be gone',
    });
  } finally {
    for (const pid of [dockerd, container, Number(registryPid)]) if (alive(pid)) process.kill(pid, 'SIGKILL');
  }
  t.notOk(alive(dockerd), 'dockerd is gone');
  t.notOk(alive(container), "the container's process is gone");
  t.equal(ofEngine(), '', "no process of the engine's (containerd, shims) is left");
  t.notOk(existsSync(engineDir), "the engine's directory is removed");
  t.notOk(await listening(registry), 'the registry is gone');
});

t.test('a file with machines booted with systemd, ended as tap ends it at its timeout, leaves no machine, cgroup, overlay or bridge', async (t) => {
  // A machine-install.test run ended by its timeout left its three machines booted: the exit hook
  // removed them in the process itself, and tap's SIGKILL came first (docs/test-machines.md).
  const machines = startFixture(machinesFixture);
  const stdout = await untilReady(machines, 300_000, "the fixture's two machines");
  const made = JSON.parse(/^made (.*)$/m.exec(stdout)?.[1] ?? 'null') as { bridge: string; scratch: string; cgroups: string[] } | null;
  if (!made) throw new Error(`the fixture did not boot its machines: ${stdout}${machines.output.stderr}`);
  /** Processes still in the machines' cgroups (nspawn, their systemd, Docker). */
  const inCgroups = () => (spawnSync('sh', ['-c', 'for dir in "$@"; do [ -d "$dir" ] && find "$dir" -name cgroup.procs -exec cat {} +; done', 'sh', ...made.cgroups], { encoding: 'utf8' }).stdout ?? '').trim();
  const mounted = () => readFileSync('/proc/self/mounts', 'utf8').includes(`${made.scratch}/`);
  t.ok(inCgroups() !== '' && mounted(), 'the machines run');

  await endAsTapTimeout(machines);
  const gone = () => inCgroups() === '' && !mounted() && !existsSync(made.scratch) && made.cgroups.every((dir) => !existsSync(dir)) && !existsSync(`/sys/class/net/${made.bridge}`);
  // Reported below, and what is left removed all the same.
  await waitFor(gone, 30_000, { what: "the machines' processes, overlays, files, cgroups and bridge to be gone" }).catch(() => undefined);
  const left = { processes: inCgroups(), overlays: mounted(), files: existsSync(made.scratch), cgroups: made.cgroups.filter((dir) => existsSync(dir)), bridge: existsSync(`/sys/class/net/${made.bridge}`) };
  reapMachineNetwork(made);
  t.same(left, { processes: '', overlays: false, files: false, cgroups: [], bridge: false }, 'nothing of the machines is left');
});
