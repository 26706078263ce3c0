import type { FastifyBaseLogger } from 'fastify';
import { counterDeltas, nothingCounted, type CounterReading } from '../../metrics-history/counter-deltas.js';
import { intervalStart } from '../../metrics-history/sample-ring.js';
import { parseStat } from './haproxy-runtime.js';

// The HAProxy plane's request and 5xx counts per service for the traffic history (the graphs and
// GET /traffic), from HAProxy's own per-backend counters instead of a log line per request: read
// over the runtime socket once per interval, just after it ends, and what each backend counted
// since the last reading is recorded into that interval for the route the backend serves. Exact,
// whatever the rate, at one `show stat` per interval.
//
// Counters live in HAProxy's worker: a reload or a restart starts a new worker counting from zero
// (counter-deltas.ts). So that no request is lost at those moments or miscounted, the counters are
// also read just before a reload and just before a backend of the pool is given to another route
// (HaproxyDataPlane), and a gateway restarting hands its last reading to the next one.

/** The backends' rows of `show stat -1 2 -1` and the worker's `show info` Pid, asked in one batch. */
export const COUNTERS_COMMAND = 'show info;show stat -1 2 -1';

/** Per backend: [answers of any status (hrsp_1xx … hrsp_5xx, hrsp_other), 5xx answers]. */
export function parseCounters(answer: string): CounterReading {
  const header = answer.indexOf('# pxname');
  const pid = /^Pid: (\d+)$/m.exec(header < 0 ? answer : answer.slice(0, header));
  if (header < 0 || pid === null) throw new Error('HAProxy answered without its Pid or its statistics');
  const rows = new Map<string, number[]>();
  for (const row of parseStat(answer.slice(header))) {
    if (row.svname !== 'BACKEND') continue;
    const answers = ['1xx', '2xx', '3xx', '4xx', '5xx', 'other'].reduce((sum, code) => sum + (Number(row[`hrsp_${code}`]) || 0), 0);
    rows.set(row.pxname!, [answers, Number(row.hrsp_5xx) || 0]);
  }
  return { source: Number(pid[1]), rows };
}

export interface TrafficCountersOptions {
  intervalSeconds: number;
  /** COUNTERS_COMMAND's answer; rejects when HAProxy does not answer. */
  read(): Promise<string>;
  /** The route name a backend (a thread's copy) serves or last served; undefined for a spare. */
  routeOf(backend: string): string | undefined;
  /** Records what a route's backends counted in the interval starting at `at`. */
  record(route: string, at: number, requests: number, errors: number): void;
  log: FastifyBaseLogger;
  now?: () => number;
}

export class HaproxyTrafficCounters {
  /** The last reading; undefined until the first, which is then only where counting starts. */
  private last: CounterReading | undefined;
  /** Every interval that ended at or before this has its counts recorded. */
  private closedUpTo = 0;
  private readings: Promise<void> = Promise.resolve();
  private timer: NodeJS.Timeout | undefined;
  private readonly now: () => number;

  constructor(private readonly options: TrafficCountersOptions) {
    this.now = options.now ?? Date.now;
  }

  /**
   * Starts reading at every interval's end. `from`: the last reading a previous gateway handed
   * over; `fresh`: HAProxy was just started by this gateway (all it counts is new); neither: an
   * adopted HAProxy's counts so far were a previous gateway's, and counting starts at the first reading.
   */
  start(from: CounterReading | undefined, fresh: boolean): void {
    this.last = from ?? (fresh ? nothingCounted() : undefined);
    this.closedUpTo = intervalStart(this.now(), this.options.intervalSeconds);
    this.schedule();
  }

  /** The last reading, for the next gateway (after `flush`). */
  lastReading(): CounterReading | undefined {
    return this.last;
  }

  /** Records the counts of every finished interval (GET /traffic asks first, so it never answers an interval without its counts). */
  upToNow(): Promise<void> {
    return this.serially(() => this.closeFinishedIntervals());
  }

  /**
   * Records what was counted so far: before a reload (the new worker counts from zero, and the
   * old one's last requests would be lost) or before a backend changes route (its counts so far
   * are its old route's). The intervals that ended first, so none of their counts move into this one.
   */
  flush(): Promise<void> {
    return this.serially(async () => {
      await this.closeFinishedIntervals();
      await this.readInto(intervalStart(this.now(), this.options.intervalSeconds));
    });
  }

  private async closeFinishedIntervals(): Promise<void> {
    const end = intervalStart(this.now(), this.options.intervalSeconds);
    if (end <= this.closedUpTo) return;
    this.closedUpTo = end;
    await this.readInto(end - this.options.intervalSeconds * 1000);
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private schedule(): void {
    const intervalMs = this.options.intervalSeconds * 1000;
    const untilEnd = intervalMs - (this.now() % intervalMs);
    this.timer = setTimeout(() => {
      void this.upToNow().finally(() => {
        if (this.timer !== undefined) this.schedule();
      });
    }, untilEnd);
    this.timer.unref();
  }

  /** One reading at a time, in order: each delta is from the reading before it. */
  private serially(read: () => Promise<void>): Promise<void> {
    this.readings = this.readings.then(read).catch((error: unknown) => this.options.log.warn({ err: error }, 'HAProxy counters not recorded'));
    return this.readings;
  }

  /** Reads the counters and records the deltas into the interval starting at `at`; a failed read is carried by the next. */
  private async readInto(at: number): Promise<void> {
    let reading: CounterReading;
    try {
      reading = parseCounters(await this.options.read());
    } catch (error) {
      this.options.log.debug({ reason: (error as Error).message }, 'HAProxy counters not read; the next reading carries them');
      return;
    }
    const perRoute = new Map<string, [number, number]>();
    for (const [backend, [requests = 0, errors = 0]] of counterDeltas(this.last, reading)) {
      const route = this.options.routeOf(backend);
      if (route === undefined) continue;
      const sum = perRoute.get(route) ?? [0, 0];
      perRoute.set(route, [sum[0] + requests, sum[1] + errors]);
    }
    this.last = reading;
    for (const [route, [requests, errors]] of perRoute) this.options.record(route, at, requests, errors);
  }
}
