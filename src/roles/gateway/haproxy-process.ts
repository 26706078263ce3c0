import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyBaseLogger } from 'fastify';
import { runtimeCommand, workerPid } from './haproxy-runtime.js';

// HAProxy as the gateway's child, in master-worker mode (`-W`, master CLI on `-S`): the master
// re-executes a worker on SIGUSR2 (a reload: the new worker takes the listening sockets over
// through `expose-fd listeners`, so no connection is refused) and its workers exit when it dies.
// If it dies anyway it is started again, with a short backoff, until the role stops.

export interface HaproxyProcessOptions {
  bin: string;
  configFile: string;
  masterSocket: string;
  runtimeSocket: string;
  pidFile: string;
  log: FastifyBaseLogger;
  /** Writes the configuration and maps for the state the gateway holds now (before every start). */
  prepare(): void;
  /** A worker started from what `prepare` wrote answers (after a start, reload or restart). */
  started(): void;
  /** HAProxy runs again after it had died: the state it started from is the one `prepare` wrote. */
  restarted(): void;
}

const READY_TIMEOUT_MS = 10_000;
const STOP_GRACE_MS = 5_000;
const SETPRIV = '/usr/bin/setpriv';
const withParentDeathSignal = existsSync(SETPRIV);
const stdio: ['ignore', 'ignore', 'pipe'] = ['ignore', 'ignore', 'pipe'];
const BACKOFF_MS = [50, 200, 500, 1_000];

export class HaproxyProcess {
  private child: ChildProcess | undefined;
  private stopping = false;
  private worker = 0;
  /** Whether a worker answers on the runtime socket. */
  running = false;
  restarts = 0;
  reloads = 0;
  /** Why it is not running, for /readyz. */
  down = 'not started yet';

  constructor(private readonly options: HaproxyProcessOptions) {}

  async start(): Promise<void> {
    this.stopLeftover();
    this.options.prepare();
    const { bin, configFile, masterSocket, log } = this.options;
    const args = ['-W', '-S', `${masterSocket},mode,600`, '-f', configFile, '-db'];
    // With setpriv (util-linux) HAProxy is killed when the gateway dies, even by SIGKILL, so it
    // cannot outlive it holding the port; the pidfile check above covers machines without it.
    const child = withParentDeathSignal ? spawn(SETPRIV, ['--pdeathsig', 'KILL', '--', bin, ...args], { stdio }) : spawn(bin, args, { stdio });
    this.child = child;
    let errors = '';
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (chunk: string) => {
      errors = (errors + chunk).slice(-4_000);
      for (const line of chunk.split('\n')) if (/ALERT|WARNING/.test(line)) log.warn({ haproxy: line.trim() }, 'haproxy');
    });
    child.once('exit', (code, signal) => this.exited(child, code, signal));
    this.worker = await this.waitForWorker(0, () => (child.exitCode !== null || child.signalCode !== null ? `haproxy exited: ${errors.trim()}` : undefined));
    this.running = true;
    this.down = '';
    this.options.started();
  }

  /**
   * Re-reads the configuration `prepare` wrote; resolves once the new worker answers. The master
   * takes `reload` on its CLI only once it has finished loading, so a reload asked for right after
   * another is not lost (a SIGUSR2 arriving while the master re-executes is).
   */
  async reload(): Promise<void> {
    const child = this.child;
    if (child === undefined || !this.running) return;
    this.options.prepare();
    const before = this.worker;
    const gone = () => (this.child !== child ? 'haproxy exited during the reload' : undefined);
    const reloads = await this.masterReloads(gone);
    await runtimeCommand(this.options.masterSocket, 'reload');
    await this.waitFor(async () => ((await this.masterReloads(gone)) > reloads ? true : undefined), gone);
    this.worker = await this.waitForWorker(before, gone);
    this.reloads += 1;
    this.options.started();
  }

  /** How many reloads the master has done (`show proc`), once its CLI answers. */
  private masterReloads(failed: () => string | undefined): Promise<number> {
    return this.waitFor(async () => {
      const answer = await runtimeCommand(this.options.masterSocket, 'show proc').catch(() => '');
      const match = /^\d+\s+master\s+(\d+)/m.exec(answer);
      return match ? Number(match[1]) : undefined;
    }, failed);
  }

  async stop(): Promise<void> {
    this.stopping = true;
    const child = this.child;
    if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    // A soft stop: the listeners close, requests in flight get the grace the Node plane gives them.
    child.kill('SIGUSR1');
    const hard = setTimeout(() => child.kill('SIGTERM'), STOP_GRACE_MS);
    const killed = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS + 5_000);
    await exited;
    clearTimeout(hard);
    clearTimeout(killed);
  }

  /** Waits until a worker other than `previous` answers on the runtime socket. */
  private waitForWorker(previous: number, failed: () => string | undefined): Promise<number> {
    return this.waitFor(async () => {
      const pid = await workerPid(this.options.runtimeSocket).catch(() => 0);
      return pid !== 0 && pid !== previous ? pid : undefined;
    }, failed);
  }

  /** Polls `probe` until it gives a value; fails when `failed` names a reason or after READY_TIMEOUT_MS. */
  private async waitFor<T>(probe: () => Promise<T | undefined>, failed: () => string | undefined): Promise<T> {
    const deadline = Date.now() + READY_TIMEOUT_MS;
    while (Date.now() < deadline) {
      const reason = failed();
      if (reason !== undefined) throw new Error(reason);
      const value = await probe();
      if (value !== undefined) return value;
      await sleep(10);
    }
    throw new Error(`haproxy did not answer within ${READY_TIMEOUT_MS} ms`);
  }

  private exited(child: ChildProcess, code: number | null, signal: NodeJS.Signals | null): void {
    if (this.child !== child) return;
    this.running = false;
    this.down = `haproxy exited (${signal ?? `code ${code}`}); restarting`;
    if (this.stopping) return;
    this.options.log.error({ code, signal }, 'haproxy exited; restarting it');
    void this.restart();
  }

  private async restart(): Promise<void> {
    for (let attempt = 0; !this.stopping; attempt++) {
      await sleep(BACKOFF_MS[Math.min(attempt, BACKOFF_MS.length - 1)]!);
      if (this.stopping) return;
      try {
        await this.start();
        this.restarts += 1;
        this.options.log.warn({ restarts: this.restarts }, 'haproxy restarted');
        this.options.restarted();
        return;
      } catch (error) {
        this.down = `haproxy does not start: ${(error as Error).message}`;
        this.options.log.error({ reason: (error as Error).message }, 'haproxy did not start');
      }
    }
  }

  /** A master left by a gateway that was killed (its pidfile names it) would hold the port: it is stopped first. */
  private stopLeftover(): void {
    let pid: number;
    try {
      pid = Number(readFileSync(this.options.pidFile, 'utf8').trim());
    } catch {
      return;
    }
    try {
      if (pid > 0 && readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(this.options.configFile)) process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
    rmSync(this.options.pidFile, { force: true });
  }
}
