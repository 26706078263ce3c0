import { Pool } from 'undici';

// Latency at a fixed, low request rate, measured open loop: one request every 1000/rate ms on a
// timer, whether or not earlier ones have answered, over a few keep-alive connections, each
// request timed from the moment it is sent with a sub-millisecond clock.
//
// autocannon's `overallRate` is not used for this: it sends each connection's share of a second
// back to back when the second starts and then waits (a burst every second), reports whole
// milliseconds, and back-fills its histogram as if every request were due 1 ms after the previous
// one, so its "p99 at 200 req/s" mostly measures that burst.

export interface PacedOptions {
  url: string;
  host?: string;
  rate: number;
  durationMs: number;
  connections: number;
}

export interface PacedResult {
  p50: number;
  p99: number;
  /** Requests that failed or answered other than 2xx. */
  errors: number;
  count: number;
}

/** The value at quantile `q` (0–1) of ascending `sorted` (nearest rank). */
export const quantile = (sorted: readonly number[], q: number): number =>
  sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;

export async function pacedLoad(options: PacedOptions): Promise<PacedResult> {
  const target = new URL(options.url);
  const pool = new Pool(target.origin, { connections: options.connections, pipelining: 1 });
  const headers = options.host ? { host: options.host } : {};
  const latencies: number[] = [];
  let errors = 0;
  const send = async (): Promise<void> => {
    const started = performance.now();
    try {
      const { statusCode, body } = await pool.request({ path: target.pathname, method: 'GET', headers });
      await body.dump();
      if (statusCode >= 200 && statusCode < 300) latencies.push(performance.now() - started);
      else errors += 1;
    } catch {
      errors += 1;
    }
  };
  const inFlight: Promise<void>[] = [];
  const interval = 1000 / options.rate;
  const total = Math.floor(options.durationMs / interval);
  const begin = performance.now();
  for (let i = 0; i < total; i++) {
    // Wait for this request's slot on the schedule (timers are late, never early).
    const wait = begin + i * interval - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    inFlight.push(send());
  }
  await Promise.all(inFlight);
  await pool.close();
  latencies.sort((a, b) => a - b);
  return { p50: quantile(latencies, 0.5), p99: quantile(latencies, 0.99), errors, count: latencies.length + errors };
}
