// Test machines booted with systemd (issue 30): `systemd-nspawn -b` containers of a Debian 13 root
// file system built here with debootstrap, each with its own address on a test bridge, systemd as
// PID 1, its own Docker engine, and the platform built in this clone at /usr/lib/platform
// (read-only) run by /usr/local/bin/platform on the machine's own Node (Debian's nodejs), so the
// units in deploy/systemd/ run unchanged.
// docs/test-machines.md says what they need and what each choice below is for.
//
// What this host imposes (issue 30, "Facts"): its PID 1 is not systemd and its cgroups are hybrid
// (v1 controllers, name=systemd, and a cgroup2 at /sys/fs/cgroup/unified). nspawn puts a machine in
// `<caller's cgroup>/payload`, so each machine is started from a cgroup of its own (under the test
// process's, in every hierarchy): two machines never share one, and everything a machine runs is
// found there and killed at the end. There is no machined: `--register=no --keep-unit`, commands
// run inside with nsenter on the machine's PID 1, and a reboot is nspawn exiting 133, after which
// the harness boots the machine again (as systemd-nspawn@.service does, RestartForceExitStatus=133).
//
// The base is cached between runs in /var/cache/platform-test/machine-base-<hash of what makes it>,
// built in a temporary directory and renamed when complete; each machine is an overlay over it.
// Everything else (machines, their cgroups, overlays, the bridge) goes at stop() and when the test
// process exits.

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, rmdirSync, writeFileSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { nodeFlagsOf, platformBin } from './platform.js';
import Docker from 'dockerode';
import { alive } from './default-ports.js';
import { ensureCommand } from './system-packages.js';
import { assertTools, freePrefix, installExitHook, makeBridge, removeLink } from './test-hosts.js';
import { waitFor } from './wait.js';

/** Debian 13, whose own nodejs (20.19) the package depends on (docs/debian-package.md says why not 12). */
const SUITE = 'trixie';
const CACHE_DIR = '/var/cache/platform-test';
/**
 * What the platform's roles need on a machine (deploy/systemd/*.service) besides systemd itself:
 * what docs/install.md's apt step fetches, here in the base because the machines have no route to
 * a mirror. docker.io only recommends docker-cli (the `docker` command), which debootstrap does not
 * install; kmod's libkmod is loaded by systemd 257's systemd-modules-load, which fails without it.
 */
export const BASE_PACKAGES = ['ca-certificates', 'curl', 'dbus', 'docker-cli', 'docker.io', 'etcd-client', 'etcd-server', 'haproxy', 'iproute2', 'kmod', 'nodejs', 'systemd', 'systemd-sysv'];

/** Where the built program is (the clone's root) and where machines see it. */
const PROJECT_ROOT = fileURLToPath(new URL('../../../', import.meta.url));
export const PLATFORM_DIR = '/usr/lib/platform';
/** A directory of the host's inside each machine: its Docker engine's second socket, for the test. */
const SHARED_DIR = '/run/platform-test';

const PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** The Debian mirror of this host's apt sources (deb822 or one-line), else deb.debian.org. */
export function debianMirror(): string {
  const dir = '/etc/apt/sources.list.d';
  const files = existsSync(dir) ? readdirSync(dir).map((name) => join(dir, name)) : [];
  if (existsSync('/etc/apt/sources.list')) files.push('/etc/apt/sources.list');
  for (const file of files) {
    const text = readFileSync(file, 'utf8');
    const match = /^URIs:\s*(\S+\/debian)\/?\s*$/m.exec(text) ?? /^deb\s+(?:\[[^\]]*\]\s+)?(\S+\/debian)\/?\s+/m.exec(text);
    if (match) return match[1]!;
  }
  return 'http://deb.debian.org/debian';
}

const run = (command: string, args: string[]): void => {
  const result = spawnSync(command, args, { encoding: 'utf8', env: { ...process.env, PATH, DEBIAN_FRONTEND: 'noninteractive' } });
  if (result.status !== 0) throw new Error(`${command} ${args.join(' ')} failed (${result.status ?? result.error?.message}): ${(result.stderr ?? '').slice(-2000)}`);
};

/**
 * What every machine has beyond the packages: networkd on, no etcd or HAProxy started by their
 * packages (a test starts what it needs), and Docker able to run under nspawn (README of the issue):
 * nspawn mounts the v1 cgroup controllers read-only, and the engine also listens on a socket in
 * the directory the host shares, which the test's Docker client uses.
 */
export function prepareBase(root: string): void {
  run('chroot', [root, 'systemctl', 'enable', 'systemd-networkd.service']);
  run('chroot', [root, 'systemctl', 'disable', 'etcd.service', 'haproxy.service']);
  rmSync(join(root, 'etc/hostname'), { force: true });
  const dropIn = join(root, 'etc/systemd/system/docker.service.d/nspawn.conf');
  mkdirSync(dirname(dropIn), { recursive: true });
  writeFileSync(
    dropIn,
    [
      '# Test machines (test/harness/systemd-machines.ts): nspawn mounts the v1 cgroup controllers read-only',
      '# (read-only bind mounts: remounting the file system rw is not enough, the bind mount must be too).',
      '[Service]',
      "ExecStartPre=/bin/sh -c 'for d in $(findmnt -rn -t cgroup -o TARGET); do [ \"$d\" = /sys/fs/cgroup/systemd ] || mount -o remount,bind,rw \"$d\"; done'",
      'ExecStart=',
      `ExecStart=/usr/sbin/dockerd -H fd:// -H unix://${SHARED_DIR}/docker.sock --containerd=/run/containerd/containerd.sock`,
      '',
    ].join('\n'),
  );
  run('chroot', [root, 'apt-get', 'clean']);
}

/** What makes the base: a change of the suite, the mirror, the packages or prepareBase() builds another. */
function baseKey(mirror: string): string {
  return createHash('sha256').update([SUITE, mirror, prepareBase.toString(), ...BASE_PACKAGES].join('\n')).digest('hex').slice(0, 12);
}

export interface MachineBase {
  path: string;
  /** Seconds the build took, or undefined when the cache had it. */
  builtSeconds: number | undefined;
}

/** The cached base, built first when missing (debootstrap: a few minutes). */
export function machineBase(): MachineBase {
  ensureCommand('debootstrap', 'debootstrap');
  const mirror = debianMirror();
  const path = join(CACHE_DIR, `machine-base-${baseKey(mirror)}`);
  if (existsSync(path)) return { path, builtSeconds: undefined };
  mkdirSync(CACHE_DIR, { recursive: true });
  // One build at a time (tap runs two test files at once): the second waits and finds it built.
  return whileHoldingBuildLock(() => {
    if (existsSync(path)) return { path, builtSeconds: undefined };
    const started = Date.now();
    const building = mkdtempSync(join(CACHE_DIR, 'building-'));
    try {
      const root = join(building, 'rootfs');
      run('debootstrap', ['--variant=minbase', `--include=${BASE_PACKAGES.join(',')}`, SUITE, root, mirror]);
      prepareBase(root);
      // Complete, so it may be used.
      renameSync(root, path);
    } finally {
      rmSync(building, { recursive: true, force: true });
    }
    return { path, builtSeconds: (Date.now() - started) / 1000 };
  });
}

/** Runs `build` holding /var/cache/platform-test/build.lock (the holder's pid; a dead holder's lock is taken over). */
function whileHoldingBuildLock<T>(build: () => T): T {
  const lock = join(CACHE_DIR, 'build.lock');
  for (;;) {
    try {
      writeFileSync(lock, String(process.pid), { flag: 'wx' });
      break;
    } catch {
      const holder = ((): number | undefined => {
        try {
          return Number(readFileSync(lock, 'utf8'));
        } catch {
          return undefined; // released meanwhile
        }
      })();
      if (holder === undefined) continue;
      // An empty file is a lock being written: only a holder known dead loses it.
      if (holder > 0 && !alive(holder)) rmSync(lock, { force: true });
      else sleepSync(1000);
    }
  }
  try {
    return build();
  } finally {
    rmSync(lock, { force: true });
  }
}

// ---- cgroups -------------------------------------------------------------------------------

/** Each hierarchy's directory of the test process (v1 controllers, name=systemd, cgroup2). */
function ownCgroupDirs(): string[] {
  const mounts = readFileSync('/proc/self/mounts', 'utf8').split('\n').map((line) => line.split(' '));
  const dirs: string[] = [];
  for (const line of readFileSync('/proc/self/cgroup', 'utf8').split('\n').filter(Boolean)) {
    const [, controllers, path] = /^\d+:([^:]*):(.*)$/.exec(line)!;
    const mount = controllers
      ? mounts.find(([, , type, options]) => type === 'cgroup' && controllers!.split(',').every((controller) => options!.split(',').includes(controller)))
      : mounts.find(([, , type]) => type === 'cgroup2');
    if (mount) dirs.push(join(mount[1]!, path!));
  }
  return [...new Set(dirs)];
}

/** Every cgroup under `dir`, deepest first. */
function cgroupsUnder(dir: string): string[] {
  if (!existsSync(dir)) return [];
  const children = readdirSync(dir, { withFileTypes: true }).filter((entry) => entry.isDirectory());
  return [...children.flatMap((child) => cgroupsUnder(join(dir, child.name))), dir];
}

const pidsIn = (dirs: string[]): string[] =>
  dirs.flatMap(cgroupsUnder).flatMap((group) => {
    try {
      return readFileSync(join(group, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean);
    } catch {
      return [];
    }
  });

/** Makes a cgroup; a v1 cpuset one gets its parent's CPUs and memory nodes (it starts with none, and takes no process then). */
function makeCgroup(dir: string): void {
  if (existsSync(dir)) return;
  makeCgroup(dirname(dir));
  mkdirSync(dir);
  for (const setting of ['cpuset.cpus', 'cpuset.mems']) {
    if (existsSync(join(dir, setting)) && readFileSync(join(dir, setting), 'utf8').trim() === '') {
      writeFileSync(join(dir, setting), readFileSync(join(dirname(dir), setting), 'utf8'));
    }
  }
}

const sleepSync = (ms: number): void => void Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

/** Kills every process in the cgroups (a machine: nspawn, its systemd, Docker's containers), then removes them. */
function removeCgroups(dirs: string[]): void {
  for (let attempt = 0; attempt < 200; attempt++) {
    const pids = pidsIn(dirs);
    if (pids.length === 0) break;
    for (const pid of pids) spawnSync('kill', ['-KILL', pid]);
    sleepSync(50);
  }
  for (const group of dirs.flatMap(cgroupsUnder)) {
    try {
      rmdirSync(group);
    } catch {
      // Still busy (a process in exit): the parent's removal reports it.
    }
  }
}

// ---- what the exit hook removes ------------------------------------------------------------

/**
 * Removes a machine network at the test process's exit: every process in its cgroups killed (the
 * machines' nspawn, systemd and everything under them, Docker's containers), the cgroups removed
 * deepest first, what is mounted under its scratch directory (the overlays) unmounted, the
 * directory and the bridge removed. A shell of its own, detached: at a file's timeout tap sends
 * SIGKILL 500 ms after SIGALRM, and this took longer, in the process itself (a machine-install.test
 * run ended by its timeout left its three machines booted, docs/test-machines.md).
 */
const MACHINES_REAPER = `
for attempt in $(seq 200); do
  pids=$(for dir in $CGROUPS; do [ -d "$dir" ] && find "$dir" -name cgroup.procs -exec cat {} + ; done 2>/dev/null)
  [ -z "$pids" ] && break
  kill -KILL $pids 2>/dev/null
  sleep 0.05
done
for dir in $CGROUPS; do [ -d "$dir" ] && find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null; done
awk -v under="$SCRATCH/" 'index($2, under) == 1 { print $2 }' /proc/mounts | sort -r | while read -r mount; do umount -l "$mount"; done
rm -rf "$SCRATCH"
ip link del "$BRIDGE" 2>/dev/null
true
`;

/** What MACHINES_REAPER is told of a network: its cgroups, scratch directory and bridge. */
const reaperEnv = (made: { bridge: string; scratch: string; cgroups: string[] }): NodeJS.ProcessEnv => ({
  PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin',
  CGROUPS: made.cgroups.join(' '),
  SCRATCH: made.scratch,
  BRIDGE: made.bridge,
});

/** Runs MACHINES_REAPER on a network's leftovers and waits for it (a test that checks the exit hook cleans up after itself with it). */
export function reapMachineNetwork(made: { bridge: string; scratch: string; cgroups: string[] }): void {
  spawnSync('sh', ['-c', MACHINES_REAPER], { stdio: 'ignore', env: reaperEnv(made) });
}

/** The machine networks not stopped yet, by scratch directory: what the exit hook hands to MACHINES_REAPER. */
const liveNetworks = new Map<string, { cgroups: string[]; bridge: string }>();
let exitHookInstalled = false;

function installMachinesExitHook(): void {
  installExitHook();
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const [scratch, { cgroups, bridge }] of liveNetworks) {
      spawn('sh', ['-c', MACHINES_REAPER], { detached: true, stdio: 'ignore', env: reaperEnv({ scratch, cgroups, bridge }) }).unref();
    }
  });
}

// ---- machines ------------------------------------------------------------------------------

export interface CommandResult {
  status: number | null;
  stdout: string;
  stderr: string;
}

export interface SystemdMachine {
  readonly name: string;
  /** Its address on the test bridge. */
  readonly address: string;
  /** Its root file system as the host sees it (an overlay over the base): files written there are the machine's. */
  readonly root: string;
  /** Its Docker engine, through the socket it also listens on in the shared directory. */
  readonly docker: Docker;
  /** What `systemctl is-system-running --wait` said at the end of the last boot: running or degraded. */
  systemState: string;
  /** The units that failed during the last boot (`systemctl --failed`), when degraded. */
  failedUnits: string[];
  /** Seconds from starting nspawn to systemd's answer, for each boot. */
  readonly bootSeconds: number[];
  /** How many times nspawn exited 133 (a reboot) and the machine booted again. */
  readonly reboots: number;
  /** Runs a command inside (all of PID 1's namespaces) and gives what it printed. */
  run(command: string[], options?: { input?: string; timeoutMs?: number }): Promise<CommandResult>;
  /** `sh -c script` inside; rejects with its output unless it exits 0. */
  sh(script: string, options?: { timeoutMs?: number }): Promise<string>;
  /** Writes a file of the machine (its parent directories made), owned by root. */
  writeFile(path: string, content: string, mode?: number): void;
  /** `systemctl reboot` inside; resolves once systemd is up again after nspawn's exit 133. */
  reboot(): Promise<void>;
  /** Kills the machine and removes its cgroups, overlay and files. */
  stop(): Promise<void>;
}

export interface BootOptions {
  /**
   * `build` (the default): this clone's built platform bind-mounted read-only at /usr/lib/platform,
   * run by /usr/local/bin/platform, and the `platform` user made, as the README's install from a
   * clone does. `none`: none of that, for a test that installs the Debian package (which owns
   * /usr/lib/platform, /usr/bin/platform and makes the user).
   */
  platform?: 'build' | 'none';
}

export interface MachineNetwork {
  /** `10.213.<x>`: the first three octets of the bridge's /24. */
  readonly prefix: string;
  /** The bridge's own address: the test process's address as the machines see it. */
  readonly bridgeAddress: string;
  readonly base: MachineBase;
  readonly machines: SystemdMachine[];
  /** What stop() removes, for a test to check: the bridge, the machines' files and overlays, their cgroups. */
  readonly made: { bridge: string; scratch: string; cgroups: string[] };
  /** Boots the next machine (address <prefix>.<10 + n>) and waits for systemd to be up; several may boot at once. */
  boot(options?: BootOptions): Promise<SystemdMachine>;
  /** Stops every machine and removes the bridge. */
  stop(): Promise<void>;
}

function assertMachineTools(): void {
  assertTools();
  ensureCommand('systemd-nspawn', 'systemd-container');
  if (!existsSync(join(PROJECT_ROOT, 'dist/src/cli.js'))) throw new Error(`test machines run the built platform: run npm run build in ${PROJECT_ROOT}`);
}

export async function startMachineNetwork(): Promise<MachineNetwork> {
  assertMachineTools();
  installMachinesExitHook();
  const base = machineBase();
  const prefix = freePrefix();
  const runId = prefix.split('.')[2]!;
  const bridge = makeBridge(prefix, runId);
  const scratch = mkdtempSync(join(tmpdir(), `platform-machines-${runId}-`));
  const cgroupName = `platform-test-${runId}-${process.pid}`;
  const cgroupParents = ownCgroupDirs().map((dir) => join(dir, cgroupName));
  const removeNetwork = (): void => {
    removeCgroups(cgroupParents);
    removeLink(bridge);
    rmSync(scratch, { recursive: true, force: true });
    liveNetworks.delete(scratch);
  };
  liveNetworks.set(scratch, { cgroups: cgroupParents, bridge });
  const machines: SystemdMachine[] = [];
  // Numbered when asked for, not when up: machines booted side by side get distinct names and addresses.
  let asked = 0;
  return {
    prefix,
    bridgeAddress: `${prefix}.1`,
    base,
    machines,
    made: { bridge, scratch, cgroups: cgroupParents },
    boot: async (options = {}) => {
      const index = ++asked;
      const platform = options.platform ?? 'build';
      const machine = await bootMachine({ name: `pt${runId}-m${index}`, address: `${prefix}.${10 + index}`, prefix, bridge, base: base.path, scratch, cgroupParents, platform });
      machines.push(machine);
      return machine;
    },
    stop: async () => {
      for (const machine of machines) await machine.stop();
      removeNetwork();
    },
  };
}

interface MachinePlan {
  name: string;
  address: string;
  prefix: string;
  bridge: string;
  base: string;
  scratch: string;
  cgroupParents: string[];
  platform: 'build' | 'none';
}

/** The machine's own files in its overlay: identity, address, Docker's settings, the platform's wrapper and user. */
function personalize(root: string, plan: MachinePlan): void {
  const write = (path: string, content: string, mode = 0o644): void => {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), content);
    chmodSync(join(root, path), mode);
  };
  write('etc/machine-id', `${randomBytes(16).toString('hex')}\n`, 0o444);
  write('etc/hostname', `${plan.name}\n`);
  // nspawn's veth is host0 inside; no IPv6 autoconfiguration, or systemd-networkd-wait-online waits ~13 s for router advertisements.
  write('etc/systemd/network/80-container-host0.network', ['[Match]', 'Name=host0', '', '[Network]', `Address=${plan.address}/24`, 'LinkLocalAddressing=no', 'IPv6AcceptRA=no', ''].join('\n'));
  // Each machine's containers in their own cgroup (v1 controllers are shared with the host's view).
  write('etc/docker/daemon.json', `${JSON.stringify({ 'cgroup-parent': `/platform-${plan.name}`, 'insecure-registries': [`${plan.prefix}.0/24`] }, null, 2)}\n`);
  if (plan.platform === 'none') return;
  write('usr/local/bin/platform', `#!/bin/sh\nexec /usr/bin/node ${[...nodeFlagsOf(platformBin), `${PLATFORM_DIR}/bin/platform`].join(' ')} "$@"\n`, 0o755);
  // As the README's install does (README "Running on machines with systemd").
  run('chroot', [root, 'useradd', '--system', '--no-create-home', '--home-dir', '/nonexistent', '--shell', '/usr/sbin/nologin', 'platform']);
}

async function bootMachine(plan: MachinePlan): Promise<SystemdMachine> {
  const dir = join(plan.scratch, plan.name);
  const [upper, work, root, dockerData, shared] = ['upper', 'work', 'root', 'docker', 'shared'].map((part) => join(dir, part)) as [string, string, string, string, string];
  for (const path of [upper, work, root, dockerData, shared]) mkdirSync(path, { recursive: true });
  const cgroups = plan.cgroupParents.map((parent) => join(parent, plan.name));
  let mounted = false;
  const remove = (): void => {
    removeCgroups(cgroups);
    if (mounted) spawnSync('umount', ['-l', root]);
    mounted = false;
    rmSync(dir, { recursive: true, force: true });
  };
  run('mount', ['-t', 'overlay', 'overlay', '-o', `lowerdir=${plan.base},upperdir=${upper},workdir=${work}`, root]);
  mounted = true;
  personalize(root, plan);
  for (const group of cgroups) makeCgroup(group);

  const nspawnArgs = [
    '--boot',
    '--register=no',
    '--keep-unit',
    '--quiet',
    `--directory=${root}`,
    `--machine=${plan.name}`,
    `--network-bridge=${plan.bridge}`,
    '--capability=all',
    '--system-call-filter=@keyring bpf',
    '--link-journal=no',
    '--resolv-conf=off',
    '--timezone=off',
    '--console=read-only',
    ...(plan.platform === 'build' ? [`--bind-ro=${PROJECT_ROOT}:${PLATFORM_DIR}`] : []),
    // Docker's overlay2 cannot stack on the machine's overlay root: its data lives on the host's file system.
    `--bind=${dockerData}:/var/lib/docker`,
    `--bind=${shared}:${SHARED_DIR}`,
  ];
  const logPath = join(dir, 'console.log');
  const log = createWriteStream(logPath, { flags: 'a' });
  let nspawn: ChildProcess | undefined;
  let leader = 0;
  let stopping = false;
  let exited: Promise<number | null> = Promise.resolve(null);
  const bootSeconds: number[] = [];
  let reboots = 0;

  const inside = (command: string[], options: { input?: string; timeoutMs?: number } = {}): Promise<CommandResult> =>
    new Promise((resolve) => {
      // env -i: nothing of the test process's environment (tap adds NODE_OPTIONS to every child's) goes in.
      const child = spawn('nsenter', ['-t', String(leader), '-a', '--', 'env', '-i', `PATH=${PATH}`, 'LANG=C.UTF-8', 'SYSTEMD_PAGER=', 'SYSTEMD_COLORS=0', ...command], {
        timeout: options.timeoutMs ?? 60_000,
      });
      let [stdout, stderr] = ['', ''];
      child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      child.on('error', (error) => (stderr += error.message));
      child.on('close', (status) => resolve({ status, stdout, stderr }));
      // A command that exits before reading its input (nsenter while the machine is still coming up)
      // closes the pipe: EPIPE here, unhandled, ended the whole test process. Its status says what happened.
      child.stdin.on('error', (error) => (stderr += `(its input: ${error.message})`));
      child.stdin.end(options.input ?? '');
    });

  /** The machine's PID 1: the child of nspawn that runs systemd. */
  const findLeader = (pid: number): number | undefined => {
    try {
      const children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').split(' ').filter(Boolean).map(Number);
      return children.find((child) => readFileSync(`/proc/${child}/comm`, 'utf8').trim() === 'systemd');
    } catch {
      return undefined;
    }
  };

  const start = async (): Promise<void> => {
    const started = Date.now();
    log.write(`--- boot ${bootSeconds.length + 1} ---\n`);
    // From the machine's own cgroups, in every hierarchy: nspawn puts the machine in <its cgroup>/payload.
    const procsFiles = cgroups.map((group) => join(group, 'cgroup.procs')).join(' ');
    const child = spawn('sh', ['-c', 'for procs in $MACHINE_CGROUPS; do echo $$ > "$procs" || exit 99; done; exec systemd-nspawn "$@"', 'sh', ...nspawnArgs], {
      env: { PATH, MACHINE_CGROUPS: procsFiles },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    nspawn = child;
    child.stdout!.pipe(log, { end: false });
    child.stderr!.pipe(log, { end: false });
    exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
    void exited.then((code) => {
      // A reboot from inside (systemctl reboot): boot again, as systemd-nspawn@.service does.
      if (code === 133 && !stopping && !rebooting) {
        reboots += 1;
        void start().catch((error: Error) => log.write(`boot after reboot failed: ${error.message}\n`));
      }
    });
    const failed = (what: string): Error => new Error(`${plan.name}: ${what}\n${readFileSync(logPath, 'utf8').slice(-3000)}`);
    leader = await waitFor(() => (child.exitCode === null ? findLeader(child.pid!) : -1), 30_000, { what: `${plan.name}'s systemd to start` }).catch((error: Error) => {
      throw failed(error.message);
    });
    if (leader === -1) throw failed(`nspawn exited ${child.exitCode}`);
    const state = await waitFor(
      async () => {
        if (child.exitCode !== null) return `nspawn exited ${child.exitCode}`;
        const answer = await inside(['systemctl', 'is-system-running', '--wait'], { timeoutMs: 90_000 });
        const said = answer.stdout.trim();
        return ['running', 'degraded'].includes(said) ? said : undefined;
      },
      120_000,
      { intervalMs: 200, what: `${plan.name} to boot` },
    ).catch((error: Error) => {
      throw failed(error.message);
    });
    if (state.startsWith('nspawn exited')) throw failed(state);
    bootSeconds.push((Date.now() - started) / 1000);
    machine.systemState = state;
    machine.failedUnits =
      state === 'degraded' ? (await inside(['systemctl', '--failed', '--plain', '--no-legend', '--no-pager'])).stdout.split('\n').filter(Boolean).map((line) => line.split(' ')[0]!) : [];
  };

  let rebooting = false;
  const machine: SystemdMachine = {
    name: plan.name,
    address: plan.address,
    root,
    docker: new Docker({ socketPath: join(shared, 'docker.sock') }),
    systemState: '',
    failedUnits: [],
    bootSeconds,
    get reboots() {
      return reboots;
    },
    run: inside,
    sh: async (script, options = {}) => {
      const result = await inside(['sh', '-c', script], options);
      if (result.status !== 0) throw new Error(`in ${plan.name}: sh -c ${JSON.stringify(script)} exited ${result.status}:\n${result.stdout}${result.stderr}`);
      return result.stdout;
    },
    writeFile: (path, content, mode = 0o644) => {
      const target = join(root, path);
      mkdirSync(dirname(target), { recursive: true });
      writeFileSync(target, content);
      chmodSync(target, mode);
    },
    reboot: async () => {
      rebooting = true;
      try {
        await inside(['systemctl', 'reboot']);
        const code = await exited;
        if (code !== 133) throw new Error(`${plan.name}: nspawn exited ${code} on reboot, not 133`);
        reboots += 1;
        await start();
      } finally {
        rebooting = false;
      }
    },
    stop: async () => {
      stopping = true;
      remove();
      if (nspawn && nspawn.exitCode === null) await exited;
      log.end();
    },
  };
  try {
    await start();
  } catch (error) {
    stopping = true;
    remove();
    throw error;
  }
  return machine;
}
