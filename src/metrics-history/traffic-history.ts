import { HISTORY_SECONDS, LATENCY_BUCKETS_SECONDS, type TrafficSample } from '../schemas/service-metrics.js';
import { SampleRing, intervalStart, ringCapacity } from './sample-ring.js';

// A gateway's last hour of requests per service: counts go into the current interval of their
// service (one array update: the Node plane records every request as it answers it), and a
// finished interval moves into the service's ring. The HAProxy plane feeds it in two parts
// (docs/gateway.md, "Traffic figures"): request and 5xx counts from HAProxy's own counters, read
// once per interval and recorded into the interval they were counted in (`counted`), and latency
// from a sampled log line, each line weighing as many requests as it stands for (`sampled`).

/** The bucket of a latency: the first whose upper bound it does not pass, else the one above the last. */
export function latencyBucket(seconds: number): number {
  for (let i = 0; i < LATENCY_BUCKETS_SECONDS.length; i++) if (seconds <= LATENCY_BUCKETS_SECONDS[i]!) return i;
  return LATENCY_BUCKETS_SECONDS.length;
}

const emptySample = (at: number): TrafficSample => ({ at, requests: 0, errors: 0, buckets: new Array<number>(LATENCY_BUCKETS_SECONDS.length + 1).fill(0) });

/** An interval with neither a request counted nor a latency sampled (the HAProxy plane's latency may come before its counts). */
const isEmpty = (sample: TrafficSample): boolean => sample.requests === 0 && sample.buckets.every((count) => count === 0);

class ServiceTraffic {
  readonly ring: SampleRing<TrafficSample>;
  current: TrafficSample;

  constructor(capacity: number, at: number) {
    this.ring = new SampleRing(capacity);
    this.current = emptySample(at);
  }

  /** Moves the current interval into the ring once `at` is past it. */
  roll(at: number): void {
    if (this.current.at >= at) return;
    if (!isEmpty(this.current)) this.ring.push(this.current);
    this.current = emptySample(at);
  }

  /**
   * The interval starting at `at`: the current one, or (counts read just after an interval ended)
   * one already finished. An interval older than the ring's newest is not kept any more in order:
   * its counts go into the current interval, late rather than lost.
   */
  intervalAt(at: number): TrafficSample {
    if (at >= this.current.at) {
      this.roll(at);
      return this.current;
    }
    const newest = this.ring.newest();
    if (newest?.at === at) return newest;
    if (newest !== undefined && newest.at > at) return this.current;
    const finished = emptySample(at);
    this.ring.push(finished);
    return finished;
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

  private serviceAt(service: string, at: number): ServiceTraffic {
    let traffic = this.services.get(service);
    if (!traffic) {
      traffic = new ServiceTraffic(this.capacity, at);
      this.services.set(service, traffic);
    }
    return traffic;
  }

  /** A request answered now (the Node plane): counted, and its latency. */
  record(service: string, status: number, seconds: number): void {
    const at = intervalStart(this.now(), this.intervalSeconds);
    const sample = this.serviceAt(service, at).intervalAt(at);
    sample.requests += 1;
    if (status >= 500) sample.errors += 1;
    sample.buckets[latencyBucket(seconds)]! += 1;
  }

  /** Requests counted elsewhere (HAProxy's counters) in the interval starting at `at`, now or just finished. */
  counted(service: string, at: number, requests: number, errors: number): void {
    const sample = this.serviceAt(service, at).intervalAt(at);
    sample.requests += requests;
    sample.errors += errors;
  }

  /** A latency sampled now, standing for `weight` requests (HAProxy logs one request in `weight`). */
  sampled(service: string, seconds: number, weight: number): void {
    const at = intervalStart(this.now(), this.intervalSeconds);
    this.serviceAt(service, at).intervalAt(at).buckets[latencyBucket(seconds)]! += weight;
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
      else if (isEmpty(traffic.current)) this.services.delete(service);
    }
    return result;
  }
}
