import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync, createWriteStream, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { ensureCommand } from './system-packages.js';
import { freePort } from './free-port.js';

// A real Distribution (Docker Registry v2) on 127.0.0.1, storing blobs in a temp dir. Docker treats
// 127.0.0.0/8 registries as insecure by default, so no TLS is needed for pushes and pulls.

export interface RegistryOptions {
  /** Where the registry posts its push/pull notifications (an event envelope per batch). */
  notificationUrl?: string;
  /** Sent as `Authorization: Bearer <token>` with each notification. */
  token?: string;
  /** The address it listens on (default REGISTRY_ADDRESS), e.g. a test bridge's, which test hosts reach. */
  address?: string;
}

export interface Registry {
  /** `127.0.0.1:PORT`, the registry part of image references. */
  host: string;
  stop(): Promise<void>;
}

/**
 * Where every harness registry listens. Loopback registries are refused unless named, so the
 * harness names this address (any port) for every `platform` it starts (platform.ts).
 */
export const REGISTRY_ADDRESS = '127.0.0.1';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function configYaml(address: string, port: number, storageDir: string, options: RegistryOptions): string {
  const lines = [
    'version: 0.1',
    'log:',
    '  level: warn',
    'storage:',
    '  filesystem:',
    `    rootdirectory: ${storageDir}`,
    '  delete:',
    '    enabled: true',
    'http:',
    `  addr: ${address}:${port}`,
  ];
  if (options.notificationUrl) {
    lines.push(
      'notifications:',
      '  endpoints:',
      '    - name: platform',
      `      url: ${options.notificationUrl}`,
      '      timeout: 2s',
      '      threshold: 5',
      '      backoff: 1s',
    );
    if (options.token) {
      lines.push('      headers:', `        Authorization: ["Bearer ${options.token}"]`);
    }
  }
  return `${lines.join('\n')}\n`;
}

async function waitForApi(host: string, child: ChildProcess, logPath: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) {
      throw new Error(`docker-registry exited with ${child.exitCode}:\n${readFileSync(logPath, 'utf8').slice(-4000)}`);
    }
    try {
      const response = await request(`http://${host}/v2/`);
      await response.body.dump();
      if (response.statusCode === 200) return;
      lastError = new Error(`GET /v2/ answered ${response.statusCode}`);
    } catch (error) {
      lastError = error;
    }
    await sleep(100);
  }
  throw new Error(`docker-registry did not answer within ${timeoutMs} ms: ${String(lastError)}`);
}

/** Starts Debian's `docker-registry serve` on a free 127.0.0.1 port. */
export async function startRegistry(options: RegistryOptions = {}): Promise<Registry> {
  ensureCommand('docker-registry', 'docker-registry');
  const dir = mkdtempSync(join(tmpdir(), 'platform-registry-'));
  const port = await freePort();
  const address = options.address ?? REGISTRY_ADDRESS;
  const host = `${address}:${port}`;
  const configPath = join(dir, 'config.yml');
  writeFileSync(configPath, configYaml(address, port, join(dir, 'storage'), options));
  const logPath = join(dir, 'registry.log');
  const log = createWriteStream(logPath);
  const child = spawn('docker-registry', ['serve', configPath], { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout?.pipe(log);
  child.stderr?.pipe(log);
  const killOnExit = () => {
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', killOnExit);

  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    }
    process.removeListener('exit', killOnExit);
    log.end();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await waitForApi(host, child, logPath, 15_000);
  } catch (error) {
    await stop();
    throw error;
  }
  return { host, stop };
}
