import { Agent, request } from 'undici';

// A bounded client loop for zero-downtime tests: a few workers send GET requests to 127.0.0.1
// with a chosen Host header until stopped (or a hard deadline), half of them on keep-alive
// connections and half on a new connection per request, and count what answered and what failed.

export interface LoadOptions {
  /** http://127.0.0.1:PORT/ */
  url: string;
  host: string;
  /** Requests in flight at most (one per worker). */
  concurrency?: number;
  /** The loop stops by itself after this, whatever happens. */
  maxDurationMs?: number;
  /** How long one request may wait for its answer before it counts as failed (default 10 s; a handover holds requests longer). */
  requestTimeoutMs?: number;
}

export interface LoadResult {
  ok: number;
  failed: number;
  /** The first few failures, for the test's message, each with when it was sent (to read beside a log). */
  failures: string[];
  /** Successful answers in order of arrival: the page body of each. */
  bodies: string[];
  /** Successful answers in order of arrival: how long each took (ms), for a benchmark's percentiles. */
  latenciesMs: number[];
  durationMs: number;
}

export interface RunningLoad {
  /** Answers so far (a live view). */
  readonly progress: { ok: number; failed: number; bodies: string[]; latenciesMs: number[] };
  /** Failed requests among those sent at or after `time` (Date.now()). */
  failedSentSince(time: number): number;
  stop(): Promise<LoadResult>;
}

export function startLoad(options: LoadOptions): RunningLoad {
  const concurrency = options.concurrency ?? 4;
  const deadline = Date.now() + (options.maxDurationMs ?? 20_000);
  const keepAlive = new Agent({ connections: concurrency, keepAliveTimeout: 30_000 });
  const fresh = new Agent({ connections: concurrency });
  const progress = { ok: 0, failed: 0, bodies: [] as string[], latenciesMs: [] as number[] };
  /** When each failed request was sent: a request in flight across a change may fail after it. */
  const failedSentAt: number[] = [];
  const failures: string[] = [];
  const started = Date.now();
  let stopped = false;

  const worker = async (index: number) => {
    // Even workers reuse connections; odd ones open a new connection for every request.
    const reuse = index % 2 === 0;
    while (!stopped && Date.now() < deadline) {
      const sentAt = Date.now();
      const started = performance.now();
      try {
        const response = await request(options.url, {
          dispatcher: reuse ? keepAlive : fresh,
          headers: { host: options.host },
          reset: !reuse,
          headersTimeout: options.requestTimeoutMs ?? 10_000,
          bodyTimeout: options.requestTimeoutMs ?? 10_000,
        });
        const body = await response.body.text();
        if (response.statusCode === 200) {
          progress.ok += 1;
          progress.bodies.push(body.trim());
          progress.latenciesMs.push(performance.now() - started);
        } else {
          progress.failed += 1;
          failedSentAt.push(sentAt);
          if (failures.length < 10) failures.push(`${response.statusCode} ${body.trim()} (sent ${new Date(sentAt).toISOString()})`);
        }
      } catch (error) {
        progress.failed += 1;
        failedSentAt.push(sentAt);
        if (failures.length < 10) failures.push(`${(error as Error).message} (${(error as { code?: string }).code ?? ''}, sent ${new Date(sentAt).toISOString()})`);
      }
    }
  };
  const workers = Array.from({ length: concurrency }, (_, i) => worker(i));

  return {
    progress,
    failedSentSince: (time: number) => failedSentAt.filter((sentAt) => sentAt >= time).length,
    stop: async () => {
      stopped = true;
      await Promise.all(workers);
      await Promise.all([keepAlive.close(), fresh.close()]);
      return { ok: progress.ok, failed: progress.failed, failures, bodies: progress.bodies, latenciesMs: progress.latenciesMs, durationMs: Date.now() - started };
    },
  };
}
