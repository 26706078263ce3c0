import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../test/harness/free-port.js';
import { waitFor } from '../test/harness/wait.js';

// The benchmarks' reference: Debian's HAProxy 2.6 with a hand-written config balancing the same
// units round robin, keep-alive on both sides, on loopback only. `backend` replaces the balancing
// line, for a hand-written config with the gateway's own balancing and retry policy.
// bench/generated-haproxy.ts runs the gateway's own generated configuration the same way.

const HAPROXY = '/usr/sbin/haproxy';

/**
 * The gateway's retry (haproxy-config.ts backendSection), hand-written: one retry of an idempotent
 * request whose reused connection the unit closed (an L7 retry, for which HAProxy copies every
 * request into a buffer).
 */
export const L7_RETRY = ['retries 1', 'option redispatch 1', 'retry-on conn-failure empty-response', 'http-request disable-l7-retry unless { method GET HEAD OPTIONS PUT DELETE }'];
/** The gateway's backend policy, hand-written: least outstanding requests and the retry. */
export const GATEWAY_POLICY = ['balance leastconn', ...L7_RETRY];

export interface ReferenceHaproxy {
  port: number;
  pid: number;
  /** The configuration it runs, for configurationSummary. */
  config: string;
  /** Its stats socket (`show stat`: how requests spread over the units). */
  socket: string;
  stop(): void;
}

/** What a benchmark's requests went over: the plane's configuration has a TLS bind either way. */
export type Traffic = 'plain HTTP' | 'TLS';

/**
 * What a benchmark compared, in one line per HAProxy configuration: the settings that decide its
 * cost per request (threads, balancing, how many copies of the route's backend, retries, buffer
 * size), read from the configuration itself so the line cannot drift from what ran.
 */
export function configurationSummary(config: string, cores: number, traffic: Traffic): string {
  const setting = (name: string): string | undefined => new RegExp(`^\\s+${name} (.+)$`, 'm').exec(config)?.[1];
  const servers = config.split(/^backend /m).slice(1).find((section) => /^\s+server (?!own )/m.test(section)) ?? '';
  const routeBackend = /^(\S+)/.exec(servers)?.[1] ?? '';
  const copies = config.match(new RegExp(`^backend ${routeBackend.replace(/\.\d+$/, '').replace(/\./g, '\\.')}(\\.\\d+)?$`, 'gm'))?.length ?? 0;
  const inSection = (name: string): string => new RegExp(`^\\s+${name} (.+)$`, 'm').exec(servers)?.[1] ?? 'none';
  return [
    `nbthread ${setting('nbthread') ?? `${cores} (default: the cores)`}`,
    `balance ${inSection('balance')}`,
    `${copies} cop${copies === 1 ? 'y' : 'ies'} of a route's backend`,
    `retry-on ${inSection('retry-on').replace(/^none$/, 'conn-failure (default)')}`,
    `tune.bufsize ${setting('tune.bufsize') ?? '16384 (default)'}`,
    ...[/^\s+bind \S+ (?:name \S+ )?(ssl .+)$/m.exec(config)?.[1]].flatMap((tls) => (tls === undefined ? [] : [`TLS bind${traffic === 'TLS' ? '' : ' (no request of this run went to it)'}: ${tls}`])),
  ].join(', ');
}

/** Prints which HAProxy ran and, per labelled configuration, its configurationSummary. */
export function printConfigurations(configs: Record<string, string>, traffic: Traffic): void {
  const version = execFileSync(HAPROXY, ['-v'], { encoding: 'utf8' }).split('\n')[0];
  console.log(`Configurations compared (${version}, ${availableParallelism()} cores, requests over ${traffic}):`);
  for (const [label, config] of Object.entries(configs)) console.log(`  ${label}: ${configurationSummary(config, availableParallelism(), traffic)}`);
}

/** The configuration the gateway's HAProxy data plane runs, from its state directory (haproxy-data-plane.ts). */
export const dataPlaneConfig = (dataDir: string, gatewayPort: number): string => readFileSync(join(dataDir, `gateway-${gatewayPort}`, 'haproxy.cfg'), 'utf8');

/**
 * The hand-written configuration: `bindOptions` follow the bind address (`ssl crt …` for TLS),
 * `backend` the balancing lines; `socket`, if given, a stats socket the benchmarks read (how
 * requests spread over the units), which costs nothing per request.
 */
export const referenceConfig = (port: number, addresses: readonly string[], bindOptions: string, backend: readonly string[] = ['balance roundrobin'], socket?: string): string =>
  [
    'global',
    '  maxconn 4096',
    ...(socket === undefined ? [] : [`  stats socket ${socket} mode 600 level admin`]),
    'defaults',
    '  mode http',
    '  option http-keep-alive',
    '  timeout connect 5s',
    '  timeout client 60s',
    '  timeout server 60s',
    'frontend bench',
    `  bind 127.0.0.1:${port}${bindOptions ? ` ${bindOptions}` : ''}`,
    '  default_backend units',
    'backend units',
    ...backend.map((line) => `  ${line}`),
    ...addresses.map((address, i) => `  server unit${i + 1} ${address}`),
    '',
  ].join('\n');

/** `bindOptions` follow the bind address (`ssl crt …` for TLS); `ready` says when it answers on `port`. */
export async function startReferenceHaproxy(
  addresses: string[],
  bindOptions: string,
  ready: (port: number) => Promise<boolean>,
  backend: readonly string[] = ['balance roundrobin'],
): Promise<ReferenceHaproxy> {
  const dir = mkdtempSync(join(tmpdir(), 'platform-haproxy-'));
  const port = await freePort();
  const socket = join(dir, 'stats.sock');
  return runHaproxy(dir, port, socket, referenceConfig(port, addresses, bindOptions, backend, socket), ready);
}

/** Runs HAProxy on `config` (written into `dir`, which `stop` removes) until it answers on `port`. */
export async function runHaproxy(dir: string, port: number, socket: string, config: string, ready: (port: number) => Promise<boolean>): Promise<ReferenceHaproxy> {
  writeFileSync(join(dir, 'haproxy.cfg'), config);
  const child = spawn(HAPROXY, ['-f', join(dir, 'haproxy.cfg'), '-db'], { stdio: ['ignore', 'ignore', 'inherit'] });
  const kill = () => child.kill('SIGKILL');
  const stop = () => {
    child.kill('SIGTERM');
    process.removeListener('exit', kill);
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', kill);
  try {
    await waitFor(() => ready(port), 10_000, { what: 'HAProxy' });
  } catch (error) {
    stop();
    throw error;
  }
  return { port, pid: child.pid!, config, socket, stop };
}
