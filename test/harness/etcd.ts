// A real etcd server for integration tests: its own loopback ports and temporary data directory,
// killed when the test process exits. With `tls`, it serves https:// and asks every client for a
// certificate signed by its CA (certificates made by openssl, tls-certificates.ts).

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { get as httpsGet } from 'node:https';
import { setPriority, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Etcd3, type IOptions } from 'etcd3';
import { exitOnSignals } from './exit-on-signal.js';
import { freePort } from './free-port.js';
import { makeTlsCertificates, type TlsCertificates } from './tls-certificates.js';

export interface EtcdProcess {
  /** Client URL, e.g. http://127.0.0.1:41234 (https:// with `tls`). */
  readonly url: string;
  readonly dataDir: string;
  /** With `tls`: the files of etcd's CA, a client certificate it accepts, and an unrelated CA. */
  readonly tls?: TlsCertificates;
  /** Graceful stop (SIGTERM); the data directory is kept so `restart()` can follow. */
  stop(): Promise<void>;
  /** SIGKILL: a crash, nothing flushed or closed. */
  kill(): Promise<void>;
  /** Stops the server if it runs, then starts it again on the same data directory and ports. */
  restart(): Promise<void>;
  /** SIGSTOP: etcd hangs (a stalled disk or VM); connections stay open and nothing answers until `thaw()`. */
  freeze(): void;
  /** SIGCONT after `freeze()`. */
  thaw(): void;
}

const STARTUP_TIMEOUT_MS = 15_000;
const STOP_TIMEOUT_MS = 5_000;

// Every child and temp dir is cleaned up when the test process ends, even after a failed test.
const children = new Set<ChildProcess>();
const tempDirs = new Set<string>();
let exitHooksInstalled = false;

function installExitHooks(): void {
  if (exitHooksInstalled) return;
  exitHooksInstalled = true;
  process.on('exit', () => {
    for (const child of children) child.kill('SIGKILL');
    for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
  });
  exitOnSignals();
}

function assertEtcdInstalled(): void {
  const probe = spawnSync('etcd', ['--version'], { stdio: 'ignore' });
  if (probe.error) {
    throw new Error(`etcd is not installed (${probe.error.message}): install the Debian package etcd-server`);
  }
}

export interface EtcdOptions {
  /** Serve clients over TLS with --client-cert-auth (peers stay on plain loopback HTTP). */
  tls?: boolean;
  /** The address it listens on for clients and peers (default 127.0.0.1), e.g. a test bridge's. */
  host?: string;
  /** etcd's --quota-backend-bytes: past it, etcd raises NOSPACE and refuses every write (default etcd's 2 GiB). */
  quotaBackendBytes?: number;
  /** The client port (default a free one): a test that points a process at an etcd before it runs. */
  clientPort?: number;
  /** Its CPU niceness (default 0): -10 gives it the CPU before the roles and engines, as docs/install.md's drop-in does on machines. */
  nice?: number;
  /** Where its data directory is made (default the system's temporary directory): /dev/shm stands in for a disk of its own. */
  dataParent?: string;
}

export async function startEtcd(options: EtcdOptions = {}): Promise<EtcdProcess> {
  assertEtcdInstalled();
  installExitHooks();
  const [clientPort, peerPort] = [options.clientPort ?? (await freePort()), await freePort()];
  const dataDir = mkdtempSync(join(options.dataParent ?? tmpdir(), 'platform-etcd-'));
  tempDirs.add(dataDir);
  // Beside the data directory, so deleting the data (a test of lost state) keeps the certificates.
  const tls = options.tls ? certificatesIn(`${dataDir}-tls`) : undefined;
  const host = options.host ?? '127.0.0.1';
  const url = `${tls ? 'https' : 'http'}://${host}:${clientPort}`;
  const peerUrl = `http://${host}:${peerPort}`;
  const args = [
    '--name', 'test',
    '--data-dir', dataDir,
    '--listen-client-urls', url,
    '--advertise-client-urls', url,
    '--listen-peer-urls', peerUrl,
    '--initial-advertise-peer-urls', peerUrl,
    '--initial-cluster', `test=${peerUrl}`,
    '--initial-cluster-state', 'new',
    '--logger', 'zap',
    '--log-level', 'error',
    ...(options.quotaBackendBytes ? ['--quota-backend-bytes', String(options.quotaBackendBytes)] : []),
    ...(tls ? ['--cert-file', tls.serverCert, '--key-file', tls.serverKey, '--trusted-ca-file', tls.ca, '--client-cert-auth'] : []),
  ];

  let child: ChildProcess | undefined;
  let output: string[] = [];

  const launch = async (): Promise<void> => {
    output = [];
    const proc = spawn('etcd', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    if (options.nice !== undefined && proc.pid !== undefined) setPriority(proc.pid, options.nice);
    child = proc;
    children.add(proc);
    // Keep the last lines for the error message if it never becomes healthy.
    const remember = (chunk: Buffer): void => {
      output.push(...chunk.toString().split('\n').filter(Boolean));
      output = output.slice(-20);
    };
    proc.stdout?.on('data', remember);
    proc.stderr?.on('data', remember);
    proc.once('exit', () => children.delete(proc));
    await waitHealthy(url, tls, proc, () => output);
  };

  const terminate = async (signal: NodeJS.Signals): Promise<void> => {
    const proc = child;
    child = undefined;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    proc.kill(signal);
    const timer = setTimeout(() => proc.kill('SIGKILL'), STOP_TIMEOUT_MS);
    await exited;
    clearTimeout(timer);
  };

  await launch();
  return {
    url,
    dataDir,
    ...(tls ? { tls } : {}),
    stop: () => terminate('SIGTERM'),
    kill: () => terminate('SIGKILL'),
    restart: async () => {
      await terminate('SIGTERM');
      await launch();
    },
    freeze: () => void child?.kill('SIGSTOP'),
    thaw: () => void child?.kill('SIGCONT'),
  };
}

function certificatesIn(dir: string): TlsCertificates {
  mkdirSync(dir);
  tempDirs.add(dir);
  return makeTlsCertificates(dir);
}

/** The etcd3 client options that reach `etcd`, with its client certificate when it has TLS. */
export function etcdClientOptions(etcd: EtcdProcess, auth?: { username: string; password: string }): IOptions {
  const { tls } = etcd;
  return {
    hosts: etcd.url,
    ...(tls ? { credentials: { rootCertificate: readFileSync(tls.ca), certChain: readFileSync(tls.clientCert), privateKey: readFileSync(tls.clientKey) } } : {}),
    ...(auth ? { auth } : {}),
  };
}

/** Turns on etcd's own authentication with a `root` user (and role) holding `password`. */
export async function enableEtcdAuth(etcd: EtcdProcess, password: string): Promise<void> {
  const client = new Etcd3(etcdClientOptions(etcd));
  try {
    await client.role('root').create();
    await client.user('root').create(password);
    await client.user('root').addRole('root');
    await client.auth.authEnable();
  } finally {
    client.close();
  }
}

async function healthy(url: string, tls: TlsCertificates | undefined): Promise<boolean> {
  if (!tls) {
    const response = await fetch(`${url}/health`, { signal: AbortSignal.timeout(1000) });
    return response.ok && ((await response.json()) as { health?: string }).health === 'true';
  }
  const body = await new Promise<string>((resolve, reject) => {
    const request = httpsGet(`${url}/health`, { ca: readFileSync(tls.ca), cert: readFileSync(tls.clientCert), key: readFileSync(tls.clientKey), timeout: 1000 }, (response) => {
      let text = '';
      response.on('data', (chunk: Buffer) => (text += chunk.toString()));
      response.on('end', () => resolve(text));
    });
    request.on('timeout', () => request.destroy(new Error('timed out')));
    request.on('error', reject);
  });
  return (JSON.parse(body) as { health?: string }).health === 'true';
}

async function waitHealthy(url: string, tls: TlsCertificates | undefined, proc: ChildProcess, output: () => string[]): Promise<void> {
  const deadline = Date.now() + STARTUP_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (proc.exitCode !== null || proc.signalCode !== null) {
      throw new Error(`etcd exited (${proc.exitCode ?? proc.signalCode}) during startup:\n${output().join('\n')}`);
    }
    try {
      if (await healthy(url, tls)) return;
    } catch {
      // not listening yet
    }
    await sleep(50);
  }
  proc.kill('SIGKILL');
  throw new Error(`etcd did not become healthy at ${url} within ${STARTUP_TIMEOUT_MS} ms:\n${output().join('\n')}`);
}

/** An etcd for one test file and a reader of its keys, both stopped when the file's tests end. */
export async function startEtcdWithReader(t: { teardown(fn: () => Promise<void>): void }): Promise<{ etcd: EtcdProcess; read(key: string): Promise<string | null> }> {
  const etcd = await startEtcd();
  const client = new Etcd3({ hosts: etcd.url });
  t.teardown(async () => {
    client.close();
    await etcd.stop();
  });
  return { etcd, read: (key) => client.get(key).string() };
}

export interface EtcdMember {
  readonly name: string;
  /** Its client URL, e.g. http://10.213.7.11:2379. */
  readonly url: string;
  /** SIGKILL: a crashed member; its data directory stays for `start()`. */
  kill(): Promise<void>;
  /** Starts a killed member again on its data directory; it rejoins the cluster. */
  start(): Promise<void>;
}

export interface EtcdCluster {
  readonly members: EtcdMember[];
  /** Every member's client URL, as `--etcd` takes them. */
  readonly urls: string[];
  /** The member that leads now, as the live members see it. */
  leader(): Promise<EtcdMember>;
  stop(): Promise<void>;
}

/**
 * A cluster of etcd members, one per test host (test-hosts.ts): each runs in its host's network
 * namespace and listens on the host's address (clients 2379, peers 2380, as in production).
 */
export async function startEtcdCluster(hosts: { name: string; address: string }[]): Promise<EtcdCluster> {
  assertEtcdInstalled();
  installExitHooks();
  const initialCluster = hosts.map((host) => `${host.name}=http://${host.address}:2380`).join(',');
  const token = `test-${Date.now().toString(36)}`;
  const members = hosts.map((host) => etcdMember(host, initialCluster, token));
  // Together: a member waits for a quorum of its peers before it answers as healthy.
  try {
    await Promise.all(members.map((member) => member.start()));
  } catch (error) {
    await Promise.all(members.map((member) => member.kill()));
    throw error;
  }
  // The leader is the live member whose status names itself as leader.
  const leader = async (): Promise<EtcdMember> => {
    for (const member of members) {
      try {
        const response = await fetch(`${member.url}/v3/maintenance/status`, { method: 'POST', body: '{}', signal: AbortSignal.timeout(1000) });
        const status = (await response.json()) as { leader?: string; header?: { member_id?: string } };
        if (status.leader !== undefined && status.leader === status.header?.member_id) return member;
      } catch {
        // down: ask the next
      }
    }
    throw new Error('no live etcd member leads');
  };
  return {
    members,
    urls: members.map((member) => member.url),
    leader,
    stop: async () => {
      await Promise.all(members.map((member) => member.kill()));
    },
  };
}

function etcdMember(host: { name: string; address: string }, initialCluster: string, token: string): EtcdMember {
  const dataDir = mkdtempSync(join(tmpdir(), `platform-etcd-${host.name}-`));
  tempDirs.add(dataDir);
  const url = `http://${host.address}:2379`;
  const args = [
    `--net=/var/run/netns/${host.name}`,
    'etcd',
    '--name', host.name,
    '--data-dir', dataDir,
    '--listen-client-urls', url,
    '--advertise-client-urls', url,
    '--listen-peer-urls', `http://${host.address}:2380`,
    '--initial-advertise-peer-urls', `http://${host.address}:2380`,
    '--initial-cluster', initialCluster,
    '--initial-cluster-token', token,
    '--initial-cluster-state', 'new',
    '--logger', 'zap',
    '--log-level', 'error',
  ];
  let child: ChildProcess | undefined;
  let output: string[] = [];
  return {
    name: host.name,
    url,
    start: async () => {
      output = [];
      // nsenter execs etcd: the child is the member itself.
      const proc = spawn('nsenter', args, { stdio: ['ignore', 'pipe', 'pipe'] });
      child = proc;
      children.add(proc);
      const remember = (chunk: Buffer): void => {
        output = [...output, ...chunk.toString().split('\n').filter(Boolean)].slice(-20);
      };
      proc.stdout?.on('data', remember);
      proc.stderr?.on('data', remember);
      proc.once('exit', () => children.delete(proc));
      await waitHealthy(url, undefined, proc, () => output);
    },
    kill: async () => {
      const proc = child;
      child = undefined;
      if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
      const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
      proc.kill('SIGKILL');
      await exited;
    },
  };
}
