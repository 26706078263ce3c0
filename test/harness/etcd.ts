// A real etcd server for integration tests: its own loopback ports and temporary data directory,
// killed when the test process exits.

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from './free-port.js';

export interface EtcdProcess {
  /** Client URL, e.g. http://127.0.0.1:41234. */
  readonly url: string;
  readonly dataDir: string;
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

export async function startEtcd(): Promise<EtcdProcess> {
  assertEtcdInstalled();
  installExitHooks();
  const [clientPort, peerPort] = [await freePort(), await freePort()];
  const dataDir = mkdtempSync(join(tmpdir(), 'platform-etcd-'));
  tempDirs.add(dataDir);
  const url = `http://127.0.0.1:${clientPort}`;
  const peerUrl = `http://127.0.0.1:${peerPort}`;
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
    await waitHealthy(url, proc, () => output);
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
    stop: () => terminate('SIGTERM'),
    kill: () => terminate('SIGKILL'),
    restart: async () => {
      await terminate('SIGTERM');
      await launch();
    },
  };
}

async function waitHealthy(url: string, proc: ChildProcess, output: () => string[]): Promise<void> {
  const deadline = Date.now() + STARTUP_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (proc.exitCode !== null || proc.signalCode !== null) {
      throw new Error(`etcd exited (${proc.exitCode ?? proc.signalCode}) during startup:\n${output().join('\n')}`);
    }
    try {
      const response = await fetch(`${url}/health`, { signal: AbortSignal.timeout(1000) });
      const body = (await response.json()) as { health?: string };
      if (response.ok && body.health === 'true') return;
    } catch {
      // not listening yet
    }
    await sleep(50);
  }
  proc.kill('SIGKILL');
  throw new Error(`etcd did not become healthy at ${url} within ${STARTUP_TIMEOUT_MS} ms:\n${output().join('\n')}`);
}
