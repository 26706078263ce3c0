import t from 'tap';
import { SampleRing, intervalStart } from '../../src/metrics-history/sample-ring.js';
import { TrafficHistory, latencyBucket } from '../../src/metrics-history/traffic-history.js';
import { bucketQuantile, trafficSeries } from '../../src/metrics-history/service-series.js';
import { HISTORY_SECONDS, LATENCY_BUCKETS_SECONDS, type GatewayTraffic } from '../../src/schemas/service-metrics.js';
import { TRAFFIC_LOG_SAMPLE_EVERY, parseTrafficLine } from '../../src/roles/gateway/haproxy-traffic-log.js';
import { coresBetween, memoryInUse } from '../../src/roles/agent/unit-usage.js';
import { haproxyConfig, type HaproxyConfigInput } from '../../src/roles/gateway/haproxy-config.js';

// The graphs' pure parts: the bounded history, the per-interval counts a gateway keeps, the merge
// of several gateways into one series with its p95, HAProxy's log line, and CPU and memory from
// Docker's counters.

t.test('a ring keeps the newest items, oldest first, and no more than its capacity', async (t) => {
  const ring = new SampleRing<number>(3);
  t.same(ring.toArray(), []);
  t.equal(ring.newest(), undefined);
  for (const n of [1, 2, 3, 4, 5]) ring.push(n);
  t.same(ring.toArray(), [3, 4, 5]);
  t.equal(ring.length, 3);
  t.equal(ring.newest(), 5);
});

t.test('intervals start on multiples of the interval, so every role cuts time the same way', async (t) => {
  t.equal(intervalStart(1_000_012_345, 10), 1_000_010_000);
  t.equal(intervalStart(1_000_010_000, 10), 1_000_010_000);
});

t.test('a latency falls in the first bucket whose bound it does not pass, else the one above the last', async (t) => {
  t.equal(latencyBucket(0), 0);
  t.equal(latencyBucket(0.005), 0);
  t.equal(latencyBucket(0.0051), 1);
  t.equal(latencyBucket(11), LATENCY_BUCKETS_SECONDS.length);
});

t.test('a gateway counts requests, 5xx and latency per interval, and answers only finished intervals', async (t) => {
  let now = 1_000_000_000_000;
  const history = new TrafficHistory(10, () => now);
  history.record('web', 200, 0.003);
  history.record('web', 502, 0.2);
  history.record('api', 200, 0.02);
  t.same(history.finished(), {}, 'the interval in progress is not answered');
  now += 10_000;
  history.record('web', 200, 0.003);
  const finished = history.finished();
  t.same(Object.keys(finished).sort(), ['api', 'web']);
  t.match(finished.web, [{ at: 1_000_000_000_000, requests: 2, errors: 1 }]);
  t.equal(finished.web![0]!.buckets.reduce((a, b) => a + b, 0), 2);
  t.equal(finished.web![0]!.buckets[latencyBucket(0.2)], 1);
  now += (HISTORY_SECONDS + 20) * 1000;
  t.same(history.finished(), {}, 'intervals older than the hour are not answered, and quiet services are forgotten');
});

t.test('the p95 interpolates inside its bucket as histogram_quantile does', async (t) => {
  const buckets = new Array<number>(LATENCY_BUCKETS_SECONDS.length + 1).fill(0);
  t.equal(bucketQuantile(0.95, buckets), null);
  buckets[0] = 100; // all within 5 ms
  t.equal(bucketQuantile(0.95, buckets), 0.005 * 0.95);
  buckets[0] = 90;
  buckets[latencyBucket(0.3)] = 10; // 10 % between 250 and 500 ms
  t.ok(Math.abs(bucketQuantile(0.95, buckets)! - 0.375) < 1e-9, 'half way into the 250-500 ms bucket');
  buckets.fill(0);
  buckets[LATENCY_BUCKETS_SECONDS.length] = 5;
  t.equal(bucketQuantile(0.95, buckets), 10, 'above the last bound: the last bound');
});

t.test("several gateways' intervals add up into one point per interval of the hour, zero where none saw a request", async (t) => {
  const now = 1_000_000_005_000;
  const at = 1_000_000_000_000 - 10_000;
  const buckets = (fast: number, slow: number) => {
    const counts = new Array<number>(LATENCY_BUCKETS_SECONDS.length + 1).fill(0);
    counts[latencyBucket(0.003)] = fast;
    counts[latencyBucket(0.7)] = slow;
    return counts;
  };
  const gateways: GatewayTraffic[] = [
    { dataPlane: 'node', intervalSeconds: 10, services: { web: [{ at, requests: 60, errors: 2, buckets: buckets(60, 0) }] } },
    { dataPlane: 'haproxy', intervalSeconds: 10, services: { web: [{ at, requests: 40, errors: 3, buckets: buckets(30, 10) }], other: [{ at, requests: 5, errors: 5, buckets: buckets(5, 0) }] } },
  ];
  const series = trafficSeries('web', gateways, 10, now);
  t.equal(series.length, HISTORY_SECONDS / 10);
  const point = series.find((p) => p.at === at)!;
  t.equal(point.requestsPerSecond, 10);
  t.equal(point.errorsPerSecond, 0.5);
  t.ok(point.p95Seconds! > 0.5 && point.p95Seconds! <= 1, `the slow tenth of all requests sets the p95 (${point.p95Seconds})`);
  t.equal(series.at(-1)!.at, at, 'the newest point is the last finished interval');
  t.same(series[0], { at: at - (HISTORY_SECONDS - 10) * 1000, requestsPerSecond: 0, errorsPerSecond: 0, p95Seconds: null });
});

t.test("HAProxy's latency lines: routed requests give their route and seconds; others nothing", async (t) => {
  t.same(parseTrafficLine('service:web 12\n'), { kind: 'service', name: 'web', seconds: 0.012 });
  t.same(parseTrafficLine('component:orchestrator 3'), { kind: 'component', name: 'orchestrator', seconds: 0.003 });
  t.equal(parseTrafficLine(' 0'), undefined, 'a request the Node server answered has no route');
  t.equal(parseTrafficLine('service:web -1'), undefined, 'an aborted request has no time');
});

t.test("HAProxy logs a raw line for one routed request in TRAFFIC_LOG_SAMPLE_EVERY to the gateway's traffic port, and none for the others", async (t) => {
  const input: HaproxyConfigInput = {
    listeners: [{ host: '127.0.0.1', port: 8080, name: 'public' }],
    internalDomain: 'platform.internal',
    ownPort: 4000,
    settings: { threads: 1, requestTimeoutSeconds: 60, idleTimeoutSeconds: 60, headersTimeoutSeconds: 10, maxHeaderSize: 16384, maxConnections: 100, maxConnectionsPerAddress: 10, upstreamConnections: 8 },
    files: { runtimeSocket: '/s/r.sock', pidFile: '/s/p', hostsMap: '/s/h.map', unitsMap: '/s/u.map', routesMap: '/s/routes.map', lua: '/s/c.lua' },
    backends: [],
  };
  t.notMatch(haproxyConfig(input), /log-format|set-log-level/, 'no port, no log');
  const config = haproxyConfig({ ...input, trafficLog: { port: 5514, sampleEvery: TRAFFIC_LOG_SAMPLE_EVERY } });
  t.match(config, new RegExp(`\\n {2}log 127\\.0\\.0\\.1:5514 len 256 format raw sample 1:${TRAFFIC_LOG_SAMPLE_EVERY} local0 info\\n`));
  t.match(config, '  log-format "%[be_name,field(1,.),map_str(/s/routes.map)] %Ta"');
  t.match(config, '  http-request set-log-level silent unless routed\n', 'the requests the Node server answers (and counts) log nothing');
  t.ok(config.indexOf('set-log-level') > config.indexOf('unset-var(txn.backend) if { path_beg /.well-known/acme-challenge/ }'), 'after every rule that leaves a request to the Node server');
  t.match(haproxyConfig({ ...input, trafficLog: { port: 5514, sampleEvery: 1 } }), /\n {2}log 127\.0\.0\.1:5514 len 256 format raw local0 info\n/, 'unsampled: every routed request');
});

t.test('counts read after an interval ended go into that interval; sampled latencies weigh the requests they stand for', async (t) => {
  let now = 1_000_000_003_000;
  const history = new TrafficHistory(10, () => now);
  const first = 1_000_000_000_000;
  history.sampled('web', 0.003, 11);
  now = first + 10_002;
  // HAProxy's counters, read just after the first interval ended; a latency of the second already came.
  history.sampled('web', 0.2, 11);
  history.counted('web', first, 30, 2);
  history.counted('api', first, 5, 0);
  now = first + 20_001;
  history.counted('web', first + 10_000, 12, 0);
  const finished = history.finished();
  t.match(finished.web, [
    { at: first, requests: 30, errors: 2 },
    { at: first + 10_000, requests: 12, errors: 0 },
  ]);
  t.equal(finished.web![0]!.buckets[latencyBucket(0.003)], 11, 'one line stands for 11 requests');
  t.equal(finished.web![1]!.buckets[latencyBucket(0.2)], 11);
  t.match(finished.api, [{ at: first, requests: 5, errors: 0 }], 'a service with counts and no sampled latency has its interval');
  t.equal(finished.api![0]!.buckets.reduce((a, b) => a + b, 0), 0, 'and no latency: no p95 is made up');
});

t.test('CPU is the growth of the counter between two reads of one container; memory leaves out the inactive page cache', async (t) => {
  const first = { container: 'c1', cpuNanos: 1e9, readAt: 10_000 };
  t.equal(coresBetween(undefined, first), null);
  t.equal(coresBetween(first, { container: 'c1', cpuNanos: 1e9 + 5e9, readAt: 20_000 }), 0.5);
  t.equal(coresBetween(first, { container: 'c2', cpuNanos: 9e9, readAt: 20_000 }), null, 'a new container starts again');
  t.equal(memoryInUse({ memory_stats: { usage: 10_000, stats: { inactive_file: 4_000 } } }), 6_000);
  t.equal(memoryInUse({ memory_stats: { usage: 10_000, stats: { total_inactive_file: 1_000 } } }), 9_000);
  t.equal(memoryInUse({}), 0);
});

t.test("the gateway's duration histogram is cumulative per service, as Prometheus reads it", async (t) => {
  const { ServiceMetrics } = await import('../../src/roles/gateway/gateway-metrics.js');
  const { roleRegistry } = await import('../../src/http/metrics.js');
  const metrics = new ServiceMetrics('histogram-test');
  metrics.answered(200, 0.012);
  metrics.answered(503, 0.3);
  metrics.sampled(20, 1);
  metrics.answered('upgrade');
  const text = await roleRegistry('gateway').metrics();
  t.match(text, '# TYPE platform_gateway_request_duration_seconds histogram');
  t.match(text, 'platform_gateway_request_duration_seconds_bucket{service="histogram-test",le="0.01"} 0\n');
  t.match(text, 'platform_gateway_request_duration_seconds_bucket{service="histogram-test",le="0.5"} 2\n');
  t.match(text, 'platform_gateway_request_duration_seconds_bucket{service="histogram-test",le="+Inf"} 3\n');
  t.match(text, 'platform_gateway_request_duration_seconds_count{service="histogram-test"} 3\n', 'a tunnel is not timed');
  const sampled = new ServiceMetrics('histogram-sampled');
  sampled.sampled(0.002, TRAFFIC_LOG_SAMPLE_EVERY);
  const after = await roleRegistry('gateway').metrics();
  t.match(after, `platform_gateway_request_duration_seconds_bucket{service="histogram-sampled",le="0.005"} ${TRAFFIC_LOG_SAMPLE_EVERY}\n`, "one of HAProxy's sampled lines counts for the requests it stands for");
  t.match(after, `platform_gateway_request_duration_seconds_count{service="histogram-sampled"} ${TRAFFIC_LOG_SAMPLE_EVERY}\n`);
});
