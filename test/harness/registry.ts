import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync, createWriteStream, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request, type Dispatcher } from 'undici';
import bcrypt from 'bcryptjs';
import { ensureCommand } from './system-packages.js';
import { freePort } from './free-port.js';

// A real Distribution (Docker Registry v2) on 127.0.0.1, storing blobs in a temp dir. Docker treats
// 127.0.0.0/8 registries as insecure by default, so no TLS is needed for pushes and pulls; a test
// of private registries asks for TLS from its own CA and htpasswd users.

export interface RegistryOptions {
  /** Where the registry posts its push/pull notifications (an event envelope per batch). */
  notificationUrl?: string;
  /** Sent as `Authorization: Bearer <token>` with each notification. */
  token?: string;
  /** Serve HTTPS with this certificate (PEM files); the caller's CA must have signed it for 127.0.0.1. */
  tls?: { cert: string; key: string; ca: string };
  /** Require these users (Basic authentication against a bcrypt htpasswd file, as `htpasswd -B` writes). */
  users?: Record<string, string>;
  /** Require bearer tokens from `realm`, signed with the key of the certificate in `rootCertBundle` (Distribution's token auth). */
  tokenAuth?: { realm: string; service: string; issuer: string; rootCertBundle: string };
  /** Serve the storage of another registry (started with its own): what was pushed there is here too. */
  storageDir?: string;
  /** The address it listens on (default REGISTRY_ADDRESS), e.g. a test bridge's, which test hosts reach. */
  address?: string;
}

export interface Registry {
  /** `127.0.0.1:PORT`, the registry part of image references. */
  host: string;
  /** Where its log is, for failure messages. */
  logPath: string;
  /** Its blobs and manifests, which another registry may serve too (`storageDir`). */
  storageDir: string;
  stop(): Promise<void>;
}

/**
 * Where every harness registry listens. Loopback registries are refused unless named, so the
 * harness names this address (any port) for every `platform` it starts (platform.ts).
 */
export const REGISTRY_ADDRESS = '127.0.0.1';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function configYaml(address: string, port: number, storageDir: string, htpasswdPath: string, options: RegistryOptions): string {
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
  if (options.tls) lines.push('  tls:', `    certificate: ${options.tls.cert}`, `    key: ${options.tls.key}`);
  if (options.users) lines.push('auth:', '  htpasswd:', '    realm: platform-test', `    path: ${htpasswdPath}`);
  if (options.tokenAuth) {
    const { realm, service, issuer, rootCertBundle } = options.tokenAuth;
    lines.push('auth:', '  token:', `    realm: ${realm}`, `    service: ${service}`, `    issuer: ${issuer}`, `    rootcertbundle: ${rootCertBundle}`);
  }
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

/** A bcrypt htpasswd file (cost 5: the registry checks it on every request, and these are test passwords). */
const htpasswd = (users: Record<string, string>): string =>
  Object.entries(users)
    .map(([user, password]) => `${user}:${bcrypt.hashSync(password, 5)}\n`)
    .join('');

async function waitForApi(base: string, child: ChildProcess, logPath: string, timeoutMs: number, dispatcher?: Dispatcher): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) {
      throw new Error(`docker-registry exited with ${child.exitCode}:\n${readFileSync(logPath, 'utf8').slice(-4000)}`);
    }
    try {
      const response = await request(`${base}/v2/`, dispatcher ? { dispatcher } : {});
      await response.body.dump();
      // With authentication, the API answers 401 to an anonymous call once it is up.
      if (response.statusCode === 200 || response.statusCode === 401) return;
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
  const storageDir = options.storageDir ?? join(dir, 'storage');
  const htpasswdPath = join(dir, 'htpasswd');
  writeFileSync(configPath, configYaml(address, port, storageDir, htpasswdPath, options));
  if (options.users) writeFileSync(htpasswdPath, htpasswd(options.users));
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
  const dispatcher = options.tls ? new Agent({ connect: { ca: readFileSync(options.tls.ca) } }) : undefined;
  try {
    await waitForApi(`${options.tls ? 'https' : 'http'}://${host}`, child, logPath, 15_000, dispatcher);
  } catch (error) {
    await stop();
    throw error;
  } finally {
    await dispatcher?.close();
  }
  return { host, logPath, storageDir, stop };
}
