// A real etcd server for integration tests: its own loopback ports and temporary data directory,
// killed when the test process exits. With `tls`, it serves https:// and asks every client for a
// certificate signed by its CA (certificates made by openssl, tls-certificates.ts).

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { get as httpsGet } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Etcd3, type IOptions } from 'etcd3';
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
  // A signal skips 'exit' handlers: clean up, then die of the same signal.
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(signal, () => {
      for (const child of children) child.kill('SIGKILL');
      process.kill(process.pid, signal);
    });
  }
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
}

export async function startEtcd(options: EtcdOptions = {}): Promise<EtcdProcess> {
  assertEtcdInstalled();
  installExitHooks();
  const [clientPort, peerPort] = [await freePort(), await freePort()];
  const dataDir = mkdtempSync(join(tmpdir(), 'platform-etcd-'));
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
    ...(tls ? ['--cert-file', tls.serverCert, '--key-file', tls.serverKey, '--trusted-ca-file', tls.ca, '--client-cert-auth'] : []),
  ];

  let child: ChildProcess | undefined;
  let output: string[] = [];

  const launch = async (): Promise<void> => {
    output = [];
    const proc = spawn('etcd', args, { stdio: ['ignore', 'pipe', 'pipe'] });
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
