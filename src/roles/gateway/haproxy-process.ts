import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { basename } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyBaseLogger } from 'fastify';
import { runtimeCommand, workerPid } from './haproxy-runtime.js';

// HAProxy in master-worker mode (`-W`, master CLI on `-S`): the master re-executes a worker on a
// reload (the new worker takes the listening sockets over through `expose-fd listeners`, so no
// connection is refused) and its workers exit when it dies. If it dies anyway it is started again,
// with a short backoff, until the role stops.
//
// HAProxy outlives its gateway: a gateway that stops for a restart leaves it serving its last
// configuration (`leave`), and so does one killed outright. The next gateway on the machine finds
// the master by the pidfile, checks it is an haproxy run from this configuration file, and adopts
// it: when the previous gateway handed its state over (a restart; haproxy-handover.ts) it goes on
// from there with runtime commands, else (a killed gateway, changed settings) it writes the files
// for its own state and reloads the master. Only a stop for good (`stop`) ends it.

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
  /**
   * Adopting a master: whether the data plane takes over what it holds as it is (a previous
   * gateway handed its state over), so runtime commands bring it up to date with no reload.
   */
  tookOver(): boolean;
}

const READY_TIMEOUT_MS = 10_000;
const STOP_GRACE_MS = 5_000;
const stdio: ['ignore', 'ignore', 'pipe'] = ['ignore', 'ignore', 'pipe'];
const BACKOFF_MS = [50, 200, 500, 1_000];
/** How often an adopted master (not this process's child: no exit event) is checked. */
const ADOPTED_POLL_MS = 200;

/** The running master: a child this process started, or one a previous gateway left and this one adopted. */
interface Master {
  pid: number;
  /** Why it is not running, or undefined while it runs. */
  gone(): string | undefined;
  /** Resolves once it has exited. */
  readonly exited: Promise<void>;
  signal(signal: NodeJS.Signals): void;
  /** Stops following it: it serves on without this process. */
  release(): void;
}

export class HaproxyProcess {
  private master: Master | undefined;
  private stopping = false;
  private worker = 0;
  /** The last reload asked of the master, settled once it has ended (either way). */
  private reloading: Promise<void> | undefined;
  /** Whether a worker answers on the runtime socket. */
  running = false;
  restarts = 0;
  reloads = 0;
  /** Why it is not running, for /readyz. */
  down = 'not started yet';

  constructor(private readonly options: HaproxyProcessOptions) {}

  /** Adopts the master a previous gateway left running, or starts one. */
  async start(): Promise<void> {
    const leftover = this.leftoverMaster();
    if (leftover !== undefined) {
      try {
        await this.adopt(leftover);
        return;
      } catch (error) {
        // It would hold the port: a fresh one cannot start beside it.
        this.options.log.warn({ pid: leftover, reason: (error as Error).message }, 'the HAProxy a previous gateway left does not answer; stopping it');
        await this.kill(leftover);
      }
    }
    this.options.prepare();
    const { bin, configFile, masterSocket, log } = this.options;
    const args = ['-W', '-S', `${masterSocket},mode,600`, '-f', configFile, '-db'];
    // A process group of its own: a terminal's Ctrl-C (SIGINT to the foreground group) reaches the
    // gateway, which stops HAProxy softly; HAProxy taking the signal itself stopped hard and printed
    // a warning for every proxy (issue 31).
    const child = spawn(bin, args, { stdio, detached: true });
    let errors = '';
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (chunk: string) => {
      errors = (errors + chunk).slice(-4_000);
      for (const line of chunk.split('\n')) {
        if (!/ALERT|WARNING/.test(line)) continue;
        // Once the gateway stops it, HAProxy tells of each proxy it stops: expected, so not a warning.
        if (this.stopping && !/ALERT/.test(line)) log.debug({ haproxy: line.trim() }, 'haproxy');
        else log.warn({ haproxy: line.trim() }, 'haproxy');
      }
    });
    // HAProxy ignores SIGPIPE: once the stream is released, what it writes after this process has gone is lost, not fatal.
    child.stderr!.on('error', () => undefined);
    const master = childMaster(child, () => errors.trim());
    this.master = master;
    child.once('exit', (code, signal) => this.exited(master, signal ?? `code ${code}`));
    this.worker = await this.waitForWorker(0, master.gone);
    this.running = true;
    this.down = '';
    this.options.started();
  }

  /**
   * Takes over a master a previous gateway left: the files are written for this process's state
   * (its own Node server's port, the current plan) and the master reloads them, seamlessly.
   */
  private async adopt(pid: number): Promise<void> {
    const master = adoptedMaster(pid, this.options.configFile, (reason) => this.exited(master, reason));
    this.master = master;
    let reloaded: boolean;
    try {
      this.worker = await this.waitForWorker(0, master.gone);
      // HAProxy 2.6 closes idle keep-alive connections at a reload (a request sent on one just then
      // fails), so a reload only when the previous gateway's state was not handed over.
      reloaded = !this.options.tookOver();
      if (reloaded) {
        this.options.prepare();
        await this.reloadMaster();
        this.reloads += 1;
      }
    } catch (error) {
      this.master = undefined;
      master.release();
      throw error;
    }
    this.running = true;
    this.down = '';
    this.options.log.info({ pid, reloaded }, reloaded ? 'adopted the HAProxy a previous gateway left serving, reloading it: nothing usable was handed over' : 'adopted the HAProxy a previous gateway left serving, as it was handed over');
    this.options.started();
  }

  /**
   * Re-reads the configuration `prepare` wrote; resolves once the new worker answers. The master
   * takes `reload` on its CLI only once it has finished loading, so a reload asked for right after
   * another is not lost (a SIGUSR2 arriving while the master re-executes is).
   */
  async reload(): Promise<void> {
    if (this.master === undefined || !this.running || this.stopping) return;
    this.options.prepare();
    await this.reloadMaster();
    this.reloads += 1;
    this.options.started();
  }

  /**
   * Has the master load the files again; resolves once a new worker answers. stop() waits for it:
   * the soft stop's SIGUSR1, like a SIGUSR2, is lost while the master re-executes, and the new
   * worker then served on until the hard stop (a Ctrl-C during the reload of a gateway's start
   * printed HAProxy's ALERT for a worker ended by SIGTERM, CI run of b8a533c).
   */
  private reloadMaster(): Promise<void> {
    const reloading = this.loadAgain();
    this.reloading = reloading.catch(() => undefined);
    return reloading;
  }

  private async loadAgain(): Promise<void> {
    const master = this.master!;
    const gone = () => (this.master !== master ? 'haproxy exited during the reload' : master.gone());
    const before = this.worker;
    const reloads = await this.masterReloads(gone);
    await runtimeCommand(this.options.masterSocket, 'reload');
    await this.waitFor(async () => ((await this.masterReloads(gone)) > reloads ? true : undefined), gone);
    this.worker = await this.waitForWorker(before, gone);
  }

  /** How many reloads the master has done (`show proc`), once its CLI answers. */
  private masterReloads(failed: () => string | undefined): Promise<number> {
    return this.waitFor(async () => {
      const answer = await runtimeCommand(this.options.masterSocket, 'show proc').catch(() => '');
      const match = /^\d+\s+master\s+(\d+)/m.exec(answer);
      return match ? Number(match[1]) : undefined;
    }, failed);
  }

  /** Stops HAProxy for good (the gateway stops, not restarts). */
  async stop(): Promise<void> {
    this.stopping = true;
    await this.reloading;
    const master = this.master;
    if (master === undefined || master.gone() !== undefined) return;
    // A soft stop: the listeners close, requests in flight get the grace the Node plane gives them.
    master.signal('SIGUSR1');
    const hard = setTimeout(() => master.signal('SIGTERM'), STOP_GRACE_MS);
    const killed = setTimeout(() => master.signal('SIGKILL'), STOP_GRACE_MS + 5_000);
    await master.exited;
    clearTimeout(hard);
    clearTimeout(killed);
  }

  /** Leaves HAProxy serving its last configuration, for the next gateway to adopt (a restart). */
  leave(): void {
    this.stopping = true;
    const master = this.master;
    if (master === undefined || master.gone() !== undefined) return;
    master.release();
    this.options.log.info({ pid: master.pid }, 'leaving HAProxy serving for the next gateway to adopt');
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

  private exited(master: Master, how: string): void {
    if (this.master !== master) return;
    this.running = false;
    this.down = `haproxy exited (${how}); restarting`;
    if (this.stopping) return;
    this.options.log.error({ exit: how }, 'haproxy exited; restarting it');
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

  /** The master a previous gateway left (its pidfile names it), if it is an haproxy running this configuration file. */
  private leftoverMaster(): number | undefined {
    let pid: number;
    try {
      pid = Number(readFileSync(this.options.pidFile, 'utf8').trim());
    } catch {
      return undefined;
    }
    if (pid > 0 && runsConfig(pid, this.options.configFile)) return pid;
    rmSync(this.options.pidFile, { force: true });
    return undefined;
  }

  /** Kills a master that cannot be adopted, and waits until it has gone (it holds the port). */
  private async kill(pid: number): Promise<void> {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
    const deadline = Date.now() + READY_TIMEOUT_MS;
    while (runsConfig(pid, this.options.configFile) && Date.now() < deadline) await sleep(10);
    rmSync(this.options.pidFile, { force: true });
  }
}

/**
 * Whether `pid` is an haproxy started with `-f configFile` (its master: the workers are its children): a pidfile may outlive its process
 * and its pid be given to another. A process that has exited (a zombie too) has no command line.
 */
export function runsConfig(pid: number, configFile: string): boolean {
  try {
    const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    return basename(argv[0] ?? '').startsWith('haproxy') && argv.some((arg, i) => arg === configFile && argv[i - 1] === '-f');
  } catch {
    return false;
  }
}

function childMaster(child: ChildProcess, errors: () => string): Master {
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    pid: child.pid!,
    gone: () => (child.exitCode !== null || child.signalCode !== null ? `haproxy exited: ${errors()}` : undefined),
    exited,
    signal: (signal) => child.kill(signal),
    release: () => {
      // Nothing of this process may keep it: the next gateway adopts it.
      child.removeAllListeners('exit');
      child.stderr?.removeAllListeners('data');
      child.stderr?.destroy();
      child.unref();
    },
  };
}

/** A master this process did not start: no exit event, so its process is checked every ADOPTED_POLL_MS. */
function adoptedMaster(pid: number, configFile: string, onExit: (how: string) => void): Master {
  let resolveExited!: () => void;
  const exited = new Promise<void>((resolve) => (resolveExited = resolve));
  let gone: string | undefined;
  const poll = setInterval(() => {
    if (runsConfig(pid, configFile)) return;
    clearInterval(poll);
    gone = 'haproxy exited';
    resolveExited();
    onExit('gone');
  }, ADOPTED_POLL_MS);
  poll.unref();
  return {
    pid,
    gone: () => gone,
    exited,
    signal: (signal) => {
      try {
        process.kill(pid, signal);
      } catch {
        // gone already
      }
    },
    release: () => clearInterval(poll),
  };
}
