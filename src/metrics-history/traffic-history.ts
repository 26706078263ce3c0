import { HISTORY_SECONDS, LATENCY_BUCKETS_SECONDS, type TrafficSample } from '../schemas/service-metrics.js';
import { SampleRing, intervalStart, ringCapacity } from './sample-ring.js';

// A gateway's last hour of requests per service: each answer is counted into the current
// interval of its service (one array update: this runs for every request), and a finished
// interval moves into the service's ring. Both data planes feed it: the Node proxy as it answers,
// HAProxy through its log lines (haproxy-traffic-log.ts).

/** The bucket of a latency: the first whose upper bound it does not pass, else the one above the last. */
export function latencyBucket(seconds: number): number {
  for (let i = 0; i < LATENCY_BUCKETS_SECONDS.length; i++) if (seconds <= LATENCY_BUCKETS_SECONDS[i]!) return i;
  return LATENCY_BUCKETS_SECONDS.length;
}

const emptySample = (at: number): TrafficSample => ({ at, requests: 0, errors: 0, buckets: new Array<number>(LATENCY_BUCKETS_SECONDS.length + 1).fill(0) });

class ServiceTraffic {
  readonly ring: SampleRing<TrafficSample>;
  current: TrafficSample;

  constructor(capacity: number, at: number) {
    this.ring = new SampleRing(capacity);
    this.current = emptySample(at);
  }

  /** Moves the current interval into the ring once `at` is past it. */
  roll(at: number): void {
    if (this.current.at === at) return;
    if (this.current.requests > 0) this.ring.push(this.current);
    this.current = emptySample(at);
  }
}

export class TrafficHistory {
  private readonly services = new Map<string, ServiceTraffic>();
  private readonly capacity: number;

  constructor(
    readonly intervalSeconds: number,
    private readonly now: () => number = Date.now,
  ) {
    this.capacity = ringCapacity(HISTORY_SECONDS, intervalSeconds);
  }

  record(service: string, status: number, seconds: number): void {
    const at = intervalStart(this.now(), this.intervalSeconds);
    let traffic = this.services.get(service);
    if (!traffic) {
      traffic = new ServiceTraffic(this.capacity, at);
      this.services.set(service, traffic);
    }
    traffic.roll(at);
    const sample = traffic.current;
    sample.requests += 1;
    if (status >= 500) sample.errors += 1;
    sample.buckets[latencyBucket(seconds)]! += 1;
  }

  /** Finished intervals within the window, by service (a service without any is left out, and forgotten). */
  finished(): Record<string, TrafficSample[]> {
    const at = intervalStart(this.now(), this.intervalSeconds);
    const oldest = at - HISTORY_SECONDS * 1000;
    const result: Record<string, TrafficSample[]> = {};
    for (const [service, traffic] of this.services) {
      traffic.roll(at);
      const samples = traffic.ring.toArray().filter((sample) => sample.at >= oldest);
      if (samples.length > 0) result[service] = samples;
      else if (traffic.current.requests === 0) this.services.delete(service);
    }
    return result;
  }
}
