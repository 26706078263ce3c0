import { writeSync } from 'node:fs';

// Debug timestamps of a deploy's phases, across the processes of a cluster: with PLATFORM_TRACE=1
// each traced point writes one line `platform-trace <wall ms> <phase> [detail]` to stderr, at
// once (a synchronous write, so the line's time is the point's). The time is wall-clock with
// sub-millisecond resolution (the process's time origin plus its monotonic clock), so lines from
// the scheduler, the agent and the orchestrator on one machine can be laid side by side:
// bench/deploy-trace.ts does that for a 10-unit deploy. Off (one boolean test) otherwise.

const enabled = process.env.PLATFORM_TRACE === '1';

export function trace(phase: string, detail?: string): void {
  if (!enabled) return;
  writeSync(2, `platform-trace ${(performance.timeOrigin + performance.now()).toFixed(2)} ${phase}${detail ? ` ${detail}` : ''}\n`);
}
