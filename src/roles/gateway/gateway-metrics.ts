import { Counter, Gauge, Histogram, type Metric } from 'prom-client';
import { roleRegistry } from '../../http/metrics.js';
import { LATENCY_BUCKETS_SECONDS } from '../../schemas/service-metrics.js';
import { latencyBucket, type TrafficHistory } from '../../metrics-history/traffic-history.js';
import { TRAFFIC_LOG_SAMPLE_EVERY } from './haproxy-traffic-log.js';

// The gateway's Prometheus series, in its role's registry (served by the gateway's GET /metrics).

/** Every service's request counts: plain numbers on the hot path, turned into series when scraped. */
const counted = new Set<ServiceMetrics>();

new Counter({
  name: 'platform_gateway_requests_total',
  help: 'Requests the gateway answered, by service (empty for an unknown host) and status ("upgrade" for a WebSocket tunnel).',
  labelNames: ['service', 'status'] as const,
  registers: [roleRegistry('gateway')],
  collect() {
    this.reset();
    for (const metrics of counted) for (const [status, count] of metrics.answers) this.inc({ service: metrics.service, status: String(status) }, count);
  },
});

const upstreamErrors = new Counter({
  name: 'platform_gateway_upstream_errors_total',
  help: 'Failed attempts to reach a unit, by service and reason (connect, reset, timeout, other).',
  labelNames: ['service', 'reason'] as const,
  registers: [roleRegistry('gateway')],
});

const retries = new Counter({
  name: 'platform_gateway_retries_total',
  help: 'Requests retried on another unit after a connection failure.',
  labelNames: ['service'] as const,
  registers: [roleRegistry('gateway')],
});

const routableUnits = new Gauge({
  name: 'platform_gateway_routable_units',
  help: 'Units (or component addresses) that take new requests, by service.',
  labelNames: ['service'] as const,
  registers: [roleRegistry('gateway')],
});

const selfLoops = new Gauge({
  name: 'platform_gateway_self_loops',
  help: 'Unit addresses left out of the routes because the platform listens there on this machine (the gateway\'s own listeners, a platform port, an announced role\'s port).',
  registers: [roleRegistry('gateway')],
});

const heldWaits = new Histogram({
  name: 'platform_gateway_held_request_seconds',
  help: 'How long requests were held during a handover before they were sent on (or answered 503 when the hold ran out), by service.',
  labelNames: ['service'] as const,
  buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
  registers: [roleRegistry('gateway')],
});

export const selfLoopsLeftOut = (count: number): void => selfLoops.set(count);

const secureContexts = new Counter({
  name: 'platform_gateway_tls_contexts_built_total',
  help: "TLS secure contexts the gateway built for its Node TLS listener (one per new or changed certificate); none under the HAProxy data plane, which terminates TLS itself.",
  registers: [roleRegistry('gateway')],
});

export const secureContextBuilt = (): void => secureContexts.inc();

/**
 * Time to answer, by service, from both data planes (the Node proxy as it answers, HAProxy from
 * its sampled log lines, each weighing the requests it stands for): a Prometheus histogram made
 * from the plain counts each service keeps, as the request counter above is, so observing a
 * request hashes no labels.
 */
const requestDuration = {
  name: 'platform_gateway_request_duration_seconds',
  help: `Time from a request to the end of its answer, by service (routed requests). HAProxy data plane: %Ta of one request in ${TRAFFIC_LOG_SAMPLE_EVERY}, each observed ${TRAFFIC_LOG_SAMPLE_EVERY} times, so _count estimates the requests (platform_gateway_haproxy_responses_total counts them exactly).`,
  type: 'histogram',
  aggregator: 'sum',
  get() {
    const values: { metricName: string; labels: Record<string, string | number>; value: number }[] = [];
    for (const metrics of counted) {
      const service = metrics.service;
      if (service === '' || metrics.durationCount === 0) continue;
      let cumulative = 0;
      metrics.durations.forEach((count, i) => {
        cumulative += count;
        const le = i < LATENCY_BUCKETS_SECONDS.length ? String(LATENCY_BUCKETS_SECONDS[i]) : '+Inf';
        values.push({ metricName: `${this.name}_bucket`, labels: { service, le }, value: cumulative });
      });
      values.push({ metricName: `${this.name}_sum`, labels: { service }, value: metrics.durationSum });
      values.push({ metricName: `${this.name}_count`, labels: { service }, value: metrics.durationCount });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  },
  reset() {},
};
roleRegistry('gateway').registerMetric(requestDuration as unknown as Metric);

/** The last hour of requests per service that `GET /traffic` answers (one gateway role per process). */
let traffic: TrafficHistory | undefined;
export function keepTraffic(history: TrafficHistory | undefined): void {
  traffic = history;
}

/** Requests and 5xx answers HAProxy counted for a route in the interval starting at `at` (haproxy-traffic-counters.ts). */
export function haproxyCounted(route: string, at: number, requests: number, errors: number): void {
  traffic?.counted(route, at, requests, errors);
}

/** One service's series. Counting a request is one Map update: no label hashing, no allocation. */
export class ServiceMetrics {
  /** Requests answered, by status. */
  readonly answers = new Map<number | 'upgrade', number>();

  constructor(readonly service: string) {
    counted.add(this);
  }

  /** Requests answered, by latency bucket (LATENCY_BUCKETS_SECONDS), their count and total seconds. */
  readonly durations = new Array<number>(LATENCY_BUCKETS_SECONDS.length + 1).fill(0);
  durationCount = 0;
  durationSum = 0;

  /** A request answered: `seconds` from its arrival to the end of the answer (a tunnel is not timed). */
  answered(status: number | 'upgrade', seconds = 0): void {
    this.answers.set(status, (this.answers.get(status) ?? 0) + 1);
    if (status !== 'upgrade') this.timed(status, seconds);
  }

  /** A request's status and time (the Node plane: every routed request). */
  private timed(status: number, seconds: number): void {
    if (this.service === '') return;
    this.observe(seconds, 1);
    traffic?.record(this.service, status, seconds);
  }

  /** The time of one request HAProxy logged, standing for `weight` requests (its log is sampled; its counters count them). */
  sampled(seconds: number, weight: number): void {
    if (this.service === '') return;
    this.observe(seconds, weight);
    traffic?.sampled(this.service, seconds, weight);
  }

  private observe(seconds: number, weight: number): void {
    this.durations[latencyBucket(seconds)]! += weight;
    this.durationCount += weight;
    this.durationSum += seconds * weight;
  }

  upstreamError(reason: 'connect' | 'reset' | 'timeout' | 'other'): void {
    upstreamErrors.inc({ service: this.service, reason });
  }

  retried(): void {
    retries.inc({ service: this.service });
  }

  /** A request held during a handover was sent on (or answered) after `seconds`. */
  heldFor(seconds: number): void {
    heldWaits.observe({ service: this.service }, seconds);
  }

  routable(count: number): void {
    routableUnits.set({ service: this.service }, count);
  }

  /** The service left the table: drop its gauge (counters keep their totals). */
  removed(): void {
    routableUnits.remove({ service: this.service });
  }
}

/** Requests for host names no route matches. */
export const unroutedMetrics = new ServiceMetrics('');
