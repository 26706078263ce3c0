import { HISTORY_SECONDS, LATENCY_BUCKETS_SECONDS, type GatewayTraffic, type TrafficPoint } from '../schemas/service-metrics.js';
import { intervalStart } from './sample-ring.js';

// Pure: a service's graphs from what its gateways and agents keep. Gateways' intervals are added
// up (each gateway saw its share of the requests), latency included: the buckets are summed
// before the percentile is taken, so it is the service's and not an average of the gateways'.

/**
 * The `q` quantile of requests counted in latency buckets, interpolated linearly inside its bucket
 * as Prometheus' histogram_quantile does; the top bucket has no upper bound, so a quantile that
 * falls in it is the last bound. Null without requests.
 */
export function bucketQuantile(q: number, buckets: readonly number[]): number | null {
  const total = buckets.reduce((sum, count) => sum + count, 0);
  if (total === 0) return null;
  const rank = q * total;
  let below = 0;
  for (let i = 0; i < buckets.length; i++) {
    const count = buckets[i]!;
    if (below + count >= rank && count > 0) {
      if (i >= LATENCY_BUCKETS_SECONDS.length) return LATENCY_BUCKETS_SECONDS.at(-1)!;
      const lower = i === 0 ? 0 : LATENCY_BUCKETS_SECONDS[i - 1]!;
      const upper = LATENCY_BUCKETS_SECONDS[i]!;
      return lower + (upper - lower) * ((rank - below) / count);
    }
    below += count;
  }
  return LATENCY_BUCKETS_SECONDS.at(-1)!;
}

/** Every finished interval of the last hour, oldest first, with the service's requests summed over `gateways`. */
export function trafficSeries(service: string, gateways: readonly GatewayTraffic[], intervalSeconds: number, now: number): TrafficPoint[] {
  const current = intervalStart(now, intervalSeconds);
  const step = intervalSeconds * 1000;
  const first = current - HISTORY_SECONDS * 1000;
  const slots = new Map<number, { requests: number; errors: number; buckets: number[] }>();
  for (const gateway of gateways) {
    for (const sample of gateway.services[service] ?? []) {
      const at = intervalStart(sample.at, intervalSeconds);
      if (at < first || at >= current) continue;
      const slot = slots.get(at) ?? { requests: 0, errors: 0, buckets: new Array<number>(LATENCY_BUCKETS_SECONDS.length + 1).fill(0) };
      slot.requests += sample.requests;
      slot.errors += sample.errors;
      sample.buckets.forEach((count, i) => {
        if (i < slot.buckets.length) slot.buckets[i]! += count;
      });
      slots.set(at, slot);
    }
  }
  const points: TrafficPoint[] = [];
  for (let at = first; at < current; at += step) {
    const slot = slots.get(at);
    points.push({
      at,
      requestsPerSecond: (slot?.requests ?? 0) / intervalSeconds,
      errorsPerSecond: (slot?.errors ?? 0) / intervalSeconds,
      p95Seconds: slot ? bucketQuantile(0.95, slot.buckets) : null,
    });
  }
  return points;
}
