import { Type, type Static } from '@sinclair/typebox';

// The last hour of a service's figures, as the roles that make them keep them (docs/dashboard.md
// "Graphs"): gateways count its requests per interval, agents read its units' CPU and memory once
// per interval; the orchestrator merges both into one answer for the dashboard.

/** Upper bounds (seconds) of the latency buckets every gateway counts in; one more bucket above the last. */
export const LATENCY_BUCKETS_SECONDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10] as const;

/** How long the figures are kept: the graphs' window. */
export const HISTORY_SECONDS = 3600;

const At = Type.Integer({ description: 'start of the interval, Unix milliseconds (a multiple of the interval)' });

/** One gateway's requests for one service in one interval. */
export const TrafficSample = Type.Object({
  at: At,
  requests: Type.Integer({ minimum: 0 }),
  /** Answers with a 5xx status. */
  errors: Type.Integer({ minimum: 0 }),
  /** Requests per latency bucket (LATENCY_BUCKETS_SECONDS, then one above the last): not cumulative. */
  buckets: Type.Array(Type.Integer({ minimum: 0 })),
});
export type TrafficSample = Static<typeof TrafficSample>;

/** `GET /traffic` on a gateway: its finished intervals of the last hour, by service. */
export const GatewayTraffic = Type.Object({
  dataPlane: Type.String(),
  intervalSeconds: Type.Integer(),
  services: Type.Record(Type.String(), Type.Array(TrafficSample)),
});
export type GatewayTraffic = Static<typeof GatewayTraffic>;

/** One unit's use in one interval, as its engine reported it. */
export const UsageSample = Type.Object({
  at: At,
  /** CPU cores in use on average over the interval (1 = one core); null for the first reading of a container. */
  cpu: Type.Union([Type.Number({ minimum: 0 }), Type.Null()]),
  memoryBytes: Type.Integer({ minimum: 0 }),
});
export type UsageSample = Static<typeof UsageSample>;

export const UnitUsage = Type.Object({ unit: Type.String(), machine: Type.String(), samples: Type.Array(UsageSample) });
export type UnitUsage = Static<typeof UnitUsage>;

/** `GET /unit-usage` on an agent: the last hour of its units' use. */
export const AgentUsage = Type.Object({ intervalSeconds: Type.Integer(), units: Type.Array(UnitUsage) });
export type AgentUsage = Static<typeof AgentUsage>;

/** One interval of a service's traffic, summed over every gateway. */
export const TrafficPoint = Type.Object({
  at: At,
  requestsPerSecond: Type.Number(),
  /** 5xx answers per second. */
  errorsPerSecond: Type.Number(),
  /** 95th percentile of the time to answer, estimated from the latency buckets; null without requests. */
  p95Seconds: Type.Union([Type.Number(), Type.Null()]),
});
export type TrafficPoint = Static<typeof TrafficPoint>;

export const ServiceMetrics = Type.Object({
  service: Type.String(),
  intervalSeconds: Type.Integer(),
  /** Oldest to newest; an interval no gateway saw a request in is a point of zero requests. */
  traffic: Type.Array(TrafficPoint),
  units: Type.Array(UnitUsage),
  /** Gateways and agents that did not answer, and why: their figures are missing from this answer. */
  unreachable: Type.Array(Type.String()),
});
export type ServiceMetrics = Static<typeof ServiceMetrics>;
