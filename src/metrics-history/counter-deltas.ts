// Pure: what happened between two readings of cumulative counters (HAProxy's per-backend request
// and response counters, haproxy-traffic-counters.ts). Counters start again from zero when the
// process keeping them is replaced (a reload or restart starts a new HAProxy worker) or when the
// thing counted is removed and added again; a delta is then the new count, never negative and
// never the difference to a count of something else.

/** Cumulative counters read at one moment, by what they count (a backend), each a row of values. */
export interface CounterReading {
  /** Who kept the counters (HAProxy's worker process id): another one counted from zero. */
  source: number;
  rows: ReadonlyMap<string, readonly number[]>;
}

/**
 * What each row counted since `previous`. A row read for the first time, a row of another source,
 * and a row with any value below its previous one count from zero: the whole row, as the values
 * of one row are reset together. Without a previous reading nothing is known to be new: no deltas
 * (a gateway that adopts a running HAProxy takes its first reading as where it starts counting).
 */
export function counterDeltas(previous: CounterReading | undefined, current: CounterReading): Map<string, number[]> {
  const deltas = new Map<string, number[]>();
  if (previous === undefined) return deltas;
  const sameSource = previous.source === current.source;
  for (const [key, values] of current.rows) {
    const before = sameSource ? previous.rows.get(key) : undefined;
    const reset = before === undefined || values.some((value, i) => value < (before[i] ?? 0));
    const delta = reset ? [...values] : values.map((value, i) => value - (before[i] ?? 0));
    if (delta.some((value) => value > 0)) deltas.set(key, delta);
  }
  return deltas;
}

/** A reading before any counting: every counter of the first real reading counts from zero. */
export const nothingCounted = (): CounterReading => ({ source: -1, rows: new Map() });
