// Runs the real `platform` binary as child processes, as an operator would, and waits until each
// role answers. Each runs in a process group of its own, which holds what it starts (a gateway's
// HAProxy, which may outlive it): every group is killed when the test process exits.

import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { REGISTRY_ADDRESS } from './registry.js';

export const platformBin = fileURLToPath(new URL('../../../bin/platform', import.meta.url));

/**
 * The Node flags a launcher's first line gives (`#!/usr/bin/env -S node --max-semi-space-size=4`):
 * the harness runs it with Node as its shebang would, flags included (an older release's has none).
 */
export function nodeFlagsOf(bin: string): string[] {
  const shebang = readFileSync(bin, 'utf8').split('\n', 1)[0]!;
  return /^#!\/usr\/bin\/env -S node( .*)?$/.exec(shebang)?.[1]?.trim().split(/\s+/) ?? [];
}

const children = new Set<ChildProcess>();
/** The process groups of every child, running or not: an HAProxy left by a gateway stays in its group. */
const groups = new Set<number>();
process.on('exit', () => {
  for (const child of children) child.kill('SIGKILL');
  for (const group of groups) {
    // A group id is the pid of its first process: with that process gone, no other can have it.
    if (!existsSync(`/proc/${group}`) || [...children].some((child) => child.pid === group)) {
      try {
        process.kill(-group, 'SIGKILL');
      } catch {
        // empty already
      }
    }
  }
});

export interface PlatformProcess {
  readonly child: ChildProcess;
  /** The last lines it printed, for failure messages. */
  output(): string;
  /**
   * Sends the signal and waits for the process to exit. The default, SIGINT, stops the platform for
   * good; SIGTERM is a restart (a gateway leaves its HAProxy serving for the next one to adopt).
   */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

/**
 * Every process may deploy from the harness's registries (--allowed-registry); a test may pass its own.
 * With `netns` it runs inside that network namespace (a test host's, test-hosts.ts), entered with
 * nsenter: nsenter execs the program, so the child is the platform process itself. `bin`: another
 * build's bin/platform (an older release, test/integration/upgrade.test.ts).
 */
export function runPlatform(args: string[], env: NodeJS.ProcessEnv = {}, options: { netns?: string; bin?: string } = {}): PlatformProcess {
  const bin = options.bin ?? platformBin;
  const command = [process.execPath, ...nodeFlagsOf(bin), bin, ...args];
  if (options.netns) command.unshift('nsenter', `--net=/var/run/netns/${options.netns}`);
  const child = spawn(command[0]!, command.slice(1), {
    env: { ...process.env, PLATFORM_LOG_LEVEL: 'warn', PLATFORM_ALLOWED_REGISTRIES: REGISTRY_ADDRESS, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  children.add(child);
  if (child.pid !== undefined) groups.add(child.pid);
  child.once('exit', () => children.delete(child));
  let lines: string[] = [];
  const remember = (chunk: Buffer) => {
    lines = [...lines, ...chunk.toString().split('\n').filter(Boolean)].slice(-40);
  };
  child.stdout?.on('data', remember);
  child.stderr?.on('data', remember);
  return {
    child,
    output: () => lines.join('\n'),
    stop: async (signal = 'SIGINT') => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/**
 * Waits until `url` + `path` (/healthz by default) answers 200, or fails with what the process
 * printed. The deadline is generous: on a saturated 2-core machine loading a role (Fastify, gRPC,
 * the schemas) took over 20 s, and how fast a role starts is measured by the benchmarks, not here.
 */
export async function waitHealthy(url: string, process: PlatformProcess, timeoutMs = 60_000, path: '/healthz' | '/readyz' = '/healthz'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (process.child.exitCode !== null) throw new Error(`platform exited with ${process.child.exitCode}:\n${process.output()}`);
    try {
      const response = await fetch(`${url}${path}`, { signal: AbortSignal.timeout(1000) });
      await response.body?.cancel();
      if (response.ok) return;
    } catch {
      // not listening yet
    }
    await sleep(50);
  }
  throw new Error(`platform at ${url} did not answer ${path} within ${timeoutMs} ms:\n${process.output()}`);
}

/** Starts `platform serve --role <role>` on a port and waits until it answers. */
export async function serveRole(role: string, port: number, flags: string[], env: NodeJS.ProcessEnv = {}, options: { bin?: string } = {}): Promise<PlatformProcess & { url: string }> {
  // A gateway's HTTPS listener takes any free port unless the test names one: test files run side by side.
  const https = role === 'gateway' && !flags.includes('--https-port') && env.PLATFORM_HTTPS_PORT === undefined ? ['--https-port', '0'] : [];
  const started = runPlatform(['serve', '--role', role, '--port', String(port), ...https, ...flags], env, options);
  const url = `http://127.0.0.1:${port}`;
  await waitHealthy(url, started);
  return Object.assign(started, { url });
}

/** JSON over HTTP for tests: returns status, parsed body and headers. */
export async function http(method: string, url: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: any; headers: Headers }> {
  const response = await fetch(url, {
    method,
    headers: body === undefined ? headers : { ...headers, 'content-type': 'application/json' },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    signal: AbortSignal.timeout(60_000),
  });
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    // not JSON: keep the text
  }
  return { status: response.status, body: parsed, headers: response.headers };
}

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** `platform <args>` as a client of the orchestrator at `orchestratorUrl`, to completion. */
export const runCli = (orchestratorUrl: string, args: string[], env: NodeJS.ProcessEnv = {}, timeoutMs = 120_000): Promise<CliRun> =>
  new Promise((resolve) => {
    execFile(process.execPath, [...nodeFlagsOf(platformBin), platformBin, ...args], { env: { ...process.env, PLATFORM_ORCHESTRATOR: orchestratorUrl, ...env }, timeout: timeoutMs }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr });
    });
  });

/**
 * `platform <args>` run as an operator on the machine would (`platform backup …`), to completion,
 * with no store or backup directory from the test's own environment.
 */
export const runOperatorCommand = (...args: string[]): Promise<CliRun> =>
  new Promise((resolve) => {
    const env = { ...process.env, PLATFORM_ETCD: '', PLATFORM_DATA_DIR: '', PLATFORM_BACKUP_DIR: '' };
    execFile(process.execPath, [...nodeFlagsOf(platformBin), platformBin, ...args], { env, timeout: 120_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr });
    });
  });
