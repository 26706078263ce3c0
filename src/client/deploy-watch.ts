import { followCluster } from './live-cluster.js';
import type { OrchestratorClient } from './orchestrator-client.js';
import type { Deployment } from '../schemas/release.js';
import { isFinished, isRunning } from '../schemas/states.js';

// `platform deploy`, `rollback` and `scale` follow the deployment they started until it ends, as
// `kubectl rollout status` and `nomad job run` do, so a person or a CI job learns from the command
// (its output and its exit code) whether the deploy worked. The deployment is read from the live
// copy of the cluster (GET /events), so each step shows as it is recorded. Ctrl-C and --timeout
// stop the watching only: the deployment is the scheduler's and goes on.

/** What the exit code says (docs/cli.md "Deploys you can watch"). */
export const WatchExit = { succeeded: 0, notSucceeded: 1, timedOut: 124, interrupted: 130 } as const;

export interface WatchTarget {
  id: string;
  service: string;
  release: number;
  /** Units the release wants (its numInstances). */
  wanted: number;
}

export interface Progress {
  state: Deployment['state'];
  release: number;
  ready: number;
  wanted: number;
  /** What it waits for or why it ended, when there is something to say. */
  reason?: string;
}

export function progressOf(deployment: Deployment, wanted: number): Progress {
  // The last progress is recorded before the last unit is seen ready; success means all are.
  const ready = deployment.state === 'succeeded' ? wanted : deployment.units.filter(isRunning).length;
  return { state: deployment.state, release: deployment.release, ready, wanted, ...optional(reasonOf(deployment)) };
}

const optional = (reason: string | undefined) => (reason ? { reason } : {});

function reasonOf(deployment: Deployment): string | undefined {
  if (deployment.reason) return deployment.reason;
  if (isFinished(deployment)) return undefined;
  const command = deployment.releaseCommand;
  if (deployment.state === 'pending' && command) return `release command ${command.state} on ${command.machine}${command.lines.length > 0 ? `: ${command.lines.at(-1)}` : ''}`;
  if (deployment.state === 'pending') return 'waiting for the scheduler';
  if (deployment.state === 'pulling') return 'placing units and pulling the image';
  const failing = deployment.units.find((unit) => unit.error);
  if (failing) return `${failing.unit} on ${failing.machine}: ${failing.error}`;
  const waiting = deployment.units.find((unit) => !isRunning(unit));
  return waiting ? `${waiting.unit} on ${waiting.machine} is ${waiting.active}/${waiting.sub}` : undefined;
}

const BAR_WIDTH = 20;

/** `[########------------]`: ready out of wanted. */
export function bar(ready: number, wanted: number): string {
  const filled = wanted > 0 ? Math.round((Math.min(ready, wanted) / wanted) * BAR_WIDTH) : BAR_WIDTH;
  return `[${'#'.repeat(filled)}${'-'.repeat(BAR_WIDTH - filled)}]`;
}

/** One line of progress: with a bar on a terminal, without one in plain output. */
export function progressLine(service: string, progress: Progress, terminal: boolean): string {
  const units = `${progress.ready}/${progress.wanted} ready`;
  return [`${service} v${progress.release}`, progress.state.padEnd(terminal ? 10 : 0), terminal ? `${bar(progress.ready, progress.wanted)} ${units}` : units, progress.reason ?? '']
    .filter(Boolean)
    .join('  ')
    .trimEnd();
}

export interface WatchOptions {
  /** Give up watching after this long (the deployment goes on). */
  timeoutMs?: number;
  out?: NodeJS.WriteStream;
  err?: NodeJS.WritableStream;
}

/** Follows the deployment until it ends; resolves to the exit code. */
export async function watchDeployment(client: OrchestratorClient, target: WatchTarget, options: WatchOptions = {}): Promise<number> {
  const out = options.out ?? process.stdout;
  const err = options.err ?? process.stderr;
  const terminal = Boolean(out.isTTY);
  const stop = new AbortController();
  let stoppedBy: 'timeout' | 'interrupt' | undefined;
  const interrupt = () => {
    stoppedBy = 'interrupt';
    stop.abort();
  };
  process.once('SIGINT', interrupt);
  const timer = options.timeoutMs === undefined ? undefined : setTimeout(() => {
    stoppedBy = 'timeout';
    stop.abort();
  }, options.timeoutMs);

  let last: Deployment | undefined;
  let shown = '';
  const show = (deployment: Deployment) => {
    last = deployment;
    const line = progressLine(target.service, progressOf(deployment, target.wanted), terminal);
    if (line === shown) return;
    shown = line;
    const width = out.columns ? out.columns - 1 : Infinity;
    out.write(terminal ? `\r\x1b[2K${line.length > width ? `${line.slice(0, width - 1)}…` : line}` : `${line}\n`);
  };
  try {
    await followCluster(client, {
      signal: stop.signal,
      onReconnect: (why) => err.write(`${terminal ? '\n' : ''}platform: lost the event stream (${why}); reconnecting\n`),
      onUpdate: async (state) => {
        // The snapshot holds every deployment in flight; one that ended long ago may be left out.
        const deployment = state.deployments.get(target.id) ?? (state.loaded && !last ? await client.deployment(target.id) : undefined);
        if (deployment) show(deployment);
        return deployment !== undefined && isFinished(deployment);
      },
    });
  } finally {
    clearTimeout(timer);
    process.off('SIGINT', interrupt);
    if (terminal && shown) out.write('\n');
  }
  return outcome(target, last, stoppedBy, options.timeoutMs, out, err);
}

function outcome(target: WatchTarget, last: Deployment | undefined, stoppedBy: 'timeout' | 'interrupt' | undefined, timeoutMs: number | undefined, out: NodeJS.WritableStream, err: NodeJS.WritableStream): number {
  const where = `it goes on: platform deployments ${target.service}`;
  if (stoppedBy === 'interrupt') {
    err.write(`stopped watching; deployment ${target.id} is ${last?.state ?? 'not seen yet'} and ${where}\n`);
    return WatchExit.interrupted;
  }
  if (stoppedBy === 'timeout' || !last || !isFinished(last)) {
    err.write(`platform: gave up watching after ${Math.round((timeoutMs ?? 0) / 1000)} s; deployment ${target.id} is ${last?.state ?? 'not seen yet'} and ${where}\n`);
    return WatchExit.timedOut;
  }
  if (last.state === 'succeeded') {
    out.write(`deployment ${target.id} succeeded: ${target.service} v${last.release} runs ${target.wanted} of ${target.wanted} units\n`);
    return WatchExit.succeeded;
  }
  err.write(`platform: deployment ${target.id} ${last.state}: ${last.reason ?? 'no reason recorded'}\n`);
  return WatchExit.notSucceeded;
}
