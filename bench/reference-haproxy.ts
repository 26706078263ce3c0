import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../test/harness/free-port.js';
import { waitFor } from '../test/harness/wait.js';

// The benchmarks' reference: Debian's HAProxy 2.6 with a hand-written config balancing the same
// units round robin, keep-alive on both sides, on loopback only. `backend` replaces the balancing
// line, for a hand-written config with the gateway's own balancing and retry policy.

const HAPROXY = '/usr/sbin/haproxy';

export interface ReferenceHaproxy {
  port: number;
  pid: number;
  stop(): void;
}

/** `bindOptions` follow the bind address (`ssl crt …` for TLS); `ready` says when it answers on `port`. */
export async function startReferenceHaproxy(
  addresses: string[],
  bindOptions: string,
  ready: (port: number) => Promise<boolean>,
  backend: readonly string[] = ['balance roundrobin'],
): Promise<ReferenceHaproxy> {
  const dir = mkdtempSync(join(tmpdir(), 'platform-haproxy-'));
  const port = await freePort();
  const config = [
    'global',
    '  maxconn 4096',
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
  writeFileSync(join(dir, 'haproxy.cfg'), config);
  const child = spawn(HAPROXY, ['-f', join(dir, 'haproxy.cfg'), '-db'], { stdio: ['ignore', 'ignore', 'inherit'] });
  const kill = () => child.kill('SIGKILL');
  process.once('exit', kill);
  await waitFor(() => ready(port), 10_000, { what: 'HAProxy' });
  return {
    port,
    pid: child.pid!,
    stop: () => {
      child.kill('SIGTERM');
      process.removeListener('exit', kill);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
