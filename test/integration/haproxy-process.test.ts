import t from 'tap';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyBaseLogger } from 'fastify';
import { pino } from 'pino';
import { freePort } from '../harness/free-port.js';
import { HaproxyProcess, runsConfig } from '../../src/roles/gateway/haproxy-process.js';

// The gateway's HAProxy master on a real HAProxy: a stop that comes while a reload is under way.
// The soft stop's SIGUSR1 reaching the master while it re-executes for the reload was lost: the new
// worker served on until the hard stop 5 s later, and HAProxy printed an ALERT for a worker ended
// by SIGTERM: the ALERT and the 5 s of gateway-haproxy.test's Ctrl-C case in the CI run of b8a533c,
// a stop right after the gateway's start. Now the stop waits for the reload, then stops softly.

const dir = mkdtempSync(join(tmpdir(), 'platform-haproxy-process-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

/** A HAProxy process manager on its own files and port; what it logs at warn or above is kept. */
async function haproxyProcess(name: string): Promise<{ process: HaproxyProcess; warnings: string[]; configFile: string }> {
  const files = { configFile: join(dir, `${name}.cfg`), masterSocket: join(dir, `${name}-master.sock`), runtimeSocket: join(dir, `${name}.sock`), pidFile: join(dir, `${name}.pid`) };
  const port = await freePort();
  const warnings: string[] = [];
  const log = pino({ level: 'warn' }, { write: (line: string) => void warnings.push(line.trim()) }) as unknown as FastifyBaseLogger;
  const config = [
    'global',
    `  stats socket ${files.runtimeSocket} mode 600 level admin expose-fd listeners`,
    `  pidfile ${files.pidFile}`,
    '  hard-stop-after 1h',
    'defaults',
    '  mode http',
    '  timeout client 10s',
    '  timeout server 10s',
    '  timeout connect 1s',
    'frontend web',
    `  bind 127.0.0.1:${port}`,
    '  http-request return status 200',
    '',
  ].join('\n');
  const process = new HaproxyProcess({ bin: 'haproxy', ...files, log, prepare: () => writeFileSync(files.configFile, config), started: () => undefined, restarted: () => undefined, tookOver: () => false });
  return { process, warnings, configFile: files.configFile };
}

t.test('a stop during a reload waits for it and stops HAProxy softly: no hard stop, no ALERT', async (t) => {
  // The reload's re-execution takes some milliseconds; a stop is sent at several points of it.
  for (const delayMs of [0, 2, 5, 10, 20, 40]) {
    const { process, warnings, configFile } = await haproxyProcess(`reload-${delayMs}`);
    await process.start();
    const master = Number(readFileSync(join(dir, `reload-${delayMs}.pid`), 'utf8'));
    t.teardown(() => {
      if (runsConfig(master, configFile)) globalThis.process.kill(master, 'SIGKILL');
    });
    const reloading = process.reload().catch((error: Error) => error.message);
    await new Promise((resolve) => setTimeout(resolve, delayMs));
    const stopAt = Date.now();
    await process.stop();
    const tookMs = Date.now() - stopAt;
    await reloading;
    t.notOk(runsConfig(master, configFile), `stop ${delayMs} ms into the reload: HAProxy has exited`);
    t.ok(tookMs < 4000, `stop ${delayMs} ms into the reload: a soft stop, ${tookMs} ms (the hard stop comes after 5 s)`);
    t.same(warnings.filter((line) => /ALERT/.test(line)), [], `stop ${delayMs} ms into the reload: no ALERT from HAProxy`);
  }
});
