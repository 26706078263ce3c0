// Which unit takes the next request: pure, on the hot path, no allocation.

export interface Candidate {
  /** Requests (and tunnels) in flight to it from this gateway. */
  inFlight: number;
  /** Until then (ms since the epoch) it is avoided: it refused a connection. */
  avoidUntil: number;
}

/**
 * The index of the candidate with the fewest requests in flight, ties broken in round-robin order
 * from `cursor` (so an idle service is plain round robin, and a slow unit gets fewer requests).
 * Candidates that recently refused a connection are skipped while any other is left; `exclude`
 * (the unit a request just failed on) is skipped unless it is the only one. -1 when empty.
 */
export function chooseUpstream(candidates: readonly Candidate[], cursor: number, now: number, exclude?: Candidate): number {
  const count = candidates.length;
  if (count === 0) return -1;
  let best = -1;
  let bestLoad = Infinity;
  let fallback = -1;
  for (let step = 0; step < count; step++) {
    const index = (cursor + step) % count;
    const candidate = candidates[index]!;
    if (candidate === exclude) continue;
    if (candidate.avoidUntil > now) {
      if (fallback === -1) fallback = index;
      continue;
    }
    if (candidate.inFlight < bestLoad) {
      best = index;
      bestLoad = candidate.inFlight;
      if (bestLoad === 0) break;
    }
  }
  if (best !== -1) return best;
  if (fallback !== -1) return fallback;
  return exclude === undefined ? -1 : candidates.indexOf(exclude);
}
