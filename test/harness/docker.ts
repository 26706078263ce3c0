import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, createWriteStream, readFileSync, type WriteStream } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import Docker from 'dockerode';
import { ensureCommand } from './system-packages.js';
import { waitFor } from './wait.js';

// A private Docker engine per test run: its own data root, exec root and socket, so tests never
// touch (or depend on) a Docker engine the machine may already run. Without a bridge network its
// containers use host networking. A test host (test-hosts.ts) runs its engine inside its network
// namespace, with a bridge: units publish ports there through Docker's userland proxy. An engine
// with a bridge outside a namespace gets a bridge of its own (not docker0, which engines of tests
// running side by side would share, handing out the same addresses), removed when it stops.

export interface DockerEngine {
  /** Path of the engine's Unix socket. */
  socket: string;
  /** `unix://<socket>`, as DOCKER_HOST would name it. */
  dockerHost: string;
  docker: Docker;
  /** Stops the engine for good and removes its data. */
  stop(): Promise<void>;
  /** Stops the engine (SIGTERM: its containers stop with it) and keeps its data for `resume()`. */
  pause(): Promise<void>;
  /** Starts a paused engine again on the same data and socket; resolves once it answers. */
  resume(): Promise<void>;
}

export interface DockerdOptions {
  /** Run inside this network namespace (`/var/run/netns/<name>`), entered with nsenter. */
  netns?: string;
  /** Give containers Docker's default bridge (ports published by the userland proxy); else none. */
  bridge?: boolean;
  /** Registries (host:port or CIDR) pulled from over plain HTTP. */
  insecureRegistries?: string[];
  /** Its CPU niceness, inherited by containerd, the shims and the containers (default: this process's). */
  nice?: number;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function waitForPing(docker: Docker, child: ChildProcess, logPath: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) {
      throw new Error(`dockerd exited with ${child.exitCode}:\n${readFileSync(logPath, 'utf8').slice(-4000)}`);
    }
    try {
      await docker.ping();
      return;
    } catch (error) {
      lastError = error;
      await sleep(200);
    }
  }
  throw new Error(`dockerd did not answer ping within ${timeoutMs} ms: ${String(lastError)}\n${readFileSync(logPath, 'utf8').slice(-4000)}`);
}

function waitForExit(child: ChildProcess, timeoutMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      resolve();
    }, timeoutMs);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/** dockerd leaves mounts under its exec root (the default network namespace); rm cannot cross them. */
function unmountUnder(dir: string): void {
  const mountPoints = readFileSync('/proc/mounts', 'utf8')
    .split('\n')
    .map((line) => line.split(' ')[1] ?? '')
    .filter((mountPoint) => mountPoint.startsWith(`${dir}/`))
    .sort((a, b) => b.length - a.length);
  for (const mountPoint of mountPoints) spawnSync('umount', ['-l', mountPoint], { stdio: 'ignore' });
}

function dockerdCommand(dir: string, socket: string, options: DockerdOptions, bridge: string | undefined): [string, string[]] {
  const args = [
    '--data-root', join(dir, 'data'),
    '--exec-root', join(dir, 'exec'),
    '--pidfile', join(dir, 'dockerd.pid'),
    '--host', `unix://${socket}`,
    `--bridge=${bridge ?? (options.bridge ? 'docker0' : 'none')}`,
    '--iptables=false',
    '--ip6tables=false',
    ...(options.insecureRegistries ?? []).map((registry) => `--insecure-registry=${registry}`),
  ];
  // Only the network namespace: `ip netns exec` also remounts /sys, and dockerd then fails with
  // "Devices cgroup isn't mounted".
  return options.netns ? ['nsenter', [`--net=/var/run/netns/${options.netns}`, 'dockerd', ...args]] : ['dockerd', args];
}

/** A bridge of the engine's own outside a namespace, on a /24 of 10.213.0.0/16 no interface here uses. */
function createPrivateBridge(): string {
  const name = `pd${randomBytes(4).toString('hex')}`;
  const used = spawnSync('ip', ['-o', '-4', 'addr'], { encoding: 'utf8' }).stdout ?? '';
  const free = [...Array(256).keys()].filter((n) => !used.includes(`10.213.${n}.`));
  const subnet = free[Math.floor(Math.random() * free.length)];
  if (subnet === undefined) throw new Error('no free /24 in 10.213.0.0/16 for a test bridge');
  for (const args of [['link', 'add', 'name', name, 'type', 'bridge'], ['addr', 'add', `10.213.${subnet}.1/24`, 'dev', name], ['link', 'set', name, 'up']]) {
    const run = spawnSync('ip', args, { encoding: 'utf8' });
    if (run.status !== 0) throw new Error(`ip ${args.join(' ')}: ${run.stderr}`);
  }
  return name;
}

/**
 * What a test process's exit leaves to a process of its own (see killOnExit): the engine's
 * containers removed, the engine killed, its shims, mounts, directory and bridge gone.
 */
const ENGINE_REAPER = `
if [ -n "$PID" ]; then
  timeout 10 docker -H "unix://$SOCKET" ps -aq | xargs -r timeout 30 docker -H "unix://$SOCKET" rm -f >/dev/null 2>&1
  kill -KILL "$PID" 2>/dev/null
fi
pkill -KILL -f "containerd-shim.*$DIR/"
awk -v dir="$DIR/" 'index($2, dir) == 1 { print length($2), $2 }' /proc/mounts | sort -rn | cut -d' ' -f2 | xargs -r -n1 umount -l 2>/dev/null
rm -rf "$DIR"
[ -z "$BRIDGE" ] || ip link del "$BRIDGE" 2>/dev/null
`;

/** Starts a real dockerd (Debian docker.io) as root and resolves once it answers ping. */
export async function startDockerd(options: DockerdOptions = {}): Promise<DockerEngine> {
  ensureCommand('dockerd', 'docker.io');
  if (process.getuid?.() !== 0) throw new Error('startDockerd needs root: dockerd runs as root');
  // Unix socket paths must stay under 108 bytes, containerd's nested ones included.
  const dir = mkdtempSync('/tmp/pd-');
  const socket = join(dir, 'docker.sock');
  const logPath = join(dir, 'dockerd.log');
  const log: WriteStream = createWriteStream(logPath);
  const docker = new Docker({ socketPath: socket });
  let child: ChildProcess | undefined;
  const bridge = options.bridge && !options.netns ? createPrivateBridge() : undefined;
  const removeBridge = () => bridge && spawnSync('ip', ['link', 'del', bridge], { stdio: 'ignore' });

  const launch = async (): Promise<void> => {
    const [dockerd, dockerdArgs] = dockerdCommand(dir, socket, options, bridge);
    const [command, args] = options.nice === undefined ? [dockerd, dockerdArgs] : ['nice', ['-n', String(options.nice), dockerd, ...dockerdArgs]];
    const started = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    child = started;
    started.stdout?.pipe(log, { end: false });
    started.stderr?.pipe(log, { end: false });
    await waitForPing(docker, started, logPath, 30_000);
  };
  const halt = async (): Promise<void> => {
    const running = child;
    child = undefined;
    if (!running) return;
    running.kill('SIGTERM');
    await waitForExit(running, 20_000);
  };

  // A test process that dies takes its engine along with the containers on it: they outlive a
  // killed dockerd (their shims and processes are not its children). Bounded: a hung engine is
  // killed all the same, and its shims (found by its exec root, which names no other engine) too.
  // Detached, in a process of its own: at a file's timeout tap sends SIGKILL 500 ms after SIGALRM,
  // and removing running containers takes longer (harness-cleanup.test), after which nothing here
  // would have killed dockerd, nor run the exit handlers registered after this one.
  const killOnExit = () => {
    spawn('sh', ['-c', ENGINE_REAPER], {
      detached: true,
      stdio: 'ignore',
      env: { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin', SOCKET: socket, DIR: dir, PID: child?.pid ? String(child.pid) : '', BRIDGE: bridge ?? '' },
    }).unref();
  };
  process.once('exit', killOnExit);

  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await halt();
    process.removeListener('exit', killOnExit);
    log.end();
    unmountUnder(dir);
    rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
    removeBridge();
  };
  try {
    await launch();
  } catch (error) {
    await stop();
    throw error;
  }
  return { socket, dockerHost: `unix://${socket}`, docker, stop, pause: halt, resume: launch };
}

/** Resolves once `docker`'s engine holds no container, running or not (`what` names the wait in a timeout). */
export async function untilEngineEmpty(docker: Docker, what: string, timeoutMs = 60_000): Promise<void> {
  await waitFor(async () => (await docker.listContainers({ all: true })).length === 0, timeoutMs, { what });
}
