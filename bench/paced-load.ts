import { Pool } from 'undici';

// Latency at a fixed, low request rate, measured open loop: requests sent on a timer, whether or
// not earlier ones have answered, over a few keep-alive connections, each request timed from the
// moment it is sent with a sub-millisecond clock.
//
// Several targets are measured in the same window, on one schedule: every tick sends one request
// to each target, each target over connections of its own. Measured one after another, a
// target's p99 moved by ±0.5 ms between windows with the machine (other processes, frequency,
// page cache), which swamps a 0.2 ms difference between two proxies; in one window both see the
// same machine. Within a tick the targets' requests are spread evenly over the interval rather than
// sent together, so they do not queue behind each other on the two cores, and which target goes
// first turns with every tick, so no target keeps the place right after the timer fires.
//
// autocannon's `overallRate` is not used for this: it sends each connection's share of a second
// back to back when the second starts and then waits (a burst every second), reports whole
// milliseconds, and back-fills its histogram as if every request were due 1 ms after the previous
// one, so its "p99 at 200 req/s" mostly measures that burst.

export interface PacedTarget {
  url: string;
  host?: string;
}

export interface PacedOptions {
  /** Requests per second to each target. */
  rate: number;
  durationMs: number;
  /** Connections to each target. */
  connections: number;
}

export interface PacedResult {
  p50: number;
  p99: number;
  p99_9: number;
  max: number;
  /** Requests that failed or answered other than 2xx. */
  errors: number;
  count: number;
}

/** The value at quantile `q` (0–1) of ascending `sorted` (nearest rank). */
export const quantile = (sorted: readonly number[], q: number): number =>
  sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;

/** One target's requests: its own connections, its latencies. */
function targetSender(target: PacedTarget, connections: number) {
  const url = new URL(target.url);
  const pool = new Pool(url.origin, { connections, pipelining: 1 });
  const headers = target.host ? { host: target.host } : {};
  const latencies: number[] = [];
  let errors = 0;
  const send = async (): Promise<void> => {
    const started = performance.now();
    try {
      const { statusCode, body } = await pool.request({ path: url.pathname, method: 'GET', headers });
      await body.dump();
      if (statusCode >= 200 && statusCode < 300) latencies.push(performance.now() - started);
      else errors += 1;
    } catch {
      errors += 1;
    }
  };
  const result = async (): Promise<PacedResult> => {
    await pool.close();
    latencies.sort((a, b) => a - b);
    return { p50: quantile(latencies, 0.5), p99: quantile(latencies, 0.99), p99_9: quantile(latencies, 0.999), max: latencies.at(-1) ?? Number.NaN, errors, count: latencies.length + errors };
  };
  return { send, result };
}

/** When each request goes out (ms from the start) and to which target (its index): see above. */
export function pacedSchedule(targets: number, rate: number, durationMs: number): { at: number; target: number }[] {
  const interval = 1000 / rate;
  const slot = interval / targets;
  const ticks = Math.floor(durationMs / interval);
  return Array.from({ length: ticks * targets }, (_, i) => {
    const [tick, place] = [Math.floor(i / targets), i % targets];
    return { at: tick * interval + place * slot, target: (tick + place) % targets };
  });
}

/** Paces all `targets` in one window (see above); one result per target, in their order. */
export async function pacedLoad(targets: readonly PacedTarget[], options: PacedOptions): Promise<PacedResult[]> {
  const senders = targets.map((target) => targetSender(target, options.connections));
  const inFlight: Promise<void>[] = [];
  const begin = performance.now();
  for (const { at, target } of pacedSchedule(senders.length, options.rate, options.durationMs)) {
    // Wait for this request's place on the schedule (timers are late, never early).
    const wait = begin + at - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    inFlight.push(senders[target]!.send());
  }
  await Promise.all(inFlight);
  return Promise.all(senders.map((sender) => sender.result()));
}
