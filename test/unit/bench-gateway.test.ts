import t from 'tap';
import { haproxyConfig } from '../../src/roles/gateway/haproxy-config.js';
import { haproxyFiles } from '../../src/roles/gateway/haproxy-data-plane.js';
import { pacedSchedule } from '../../bench/paced-load.js';
import { sharedBackend } from '../../bench/generated-haproxy.js';

// The gateway bench's pure parts: the schedule that paces several targets in one window, and the
// generated configuration with one backend shared by HAProxy's threads.

t.test('the paced schedule sends each target one request a tick, spread over the tick, the first place turning', async (t) => {
  const schedule = pacedSchedule(3, 200, 1000);
  t.equal(schedule.length, 600, '200 requests a second to each of 3 targets');
  for (const target of [0, 1, 2]) t.equal(schedule.filter((request) => request.target === target).length, 200, `target ${target} gets its 200`);
  t.same(
    schedule.slice(0, 6).map((request) => request.target),
    [0, 1, 2, 1, 2, 0],
    'each tick sends to every target once, the next tick starting one later',
  );
  const gaps = schedule.slice(1).map((request, i) => request.at - schedule[i]!.at);
  t.ok(gaps.every((gap) => Math.abs(gap - 5 / 3) < 1e-9), 'the requests are spread evenly (5 ms ticks, 3 places)');
  for (const target of [0, 1, 2]) {
    const places = schedule.filter((request) => request.target === target).map((request) => Math.round((request.at % 5) / (5 / 3)));
    t.ok([0, 1, 2].every((place) => places.filter((p) => p === place).length >= 66), `target ${target} is first, second and third a third of the time each`);
  }
});

t.test('the generated configuration with one shared backend: all threads, one copy of each backend with a unit\'s whole cap', async (t) => {
  const backend = { name: 'b_0', label: 'service:web', slots: [{ address: '127.0.0.1:5001', unit: 'web.1' }, {}] };
  const settings = { threads: 1, requestTimeoutSeconds: 60, idleTimeoutSeconds: 60, headersTimeoutSeconds: 10, maxHeaderSize: 16384, maxConnections: 2048, maxConnectionsPerAddress: 256, upstreamConnections: 128 };
  const input = { listeners: [{ host: '127.0.0.1', port: 8080, name: 'public' as const }], internalDomain: 'platform.internal', ownPort: 4000, settings, files: haproxyFiles('/s'), backends: [backend] };
  const shared = sharedBackend(haproxyConfig(input), 4);
  t.match(shared, /^ {2}nbthread 4$/m, 'HAProxy runs the machine\'s threads');
  t.match(shared, /use_backend %\[var\(txn\.backend\)\]\.0 if routed/, 'every thread routes to the one copy');
  t.equal(shared.match(/^backend b_0/gm)?.length, 1, 'one copy of the backend');
  t.match(shared, /server b_0-1 127\.0\.0\.1:5001 maxconn 128$/m, 'a unit keeps its whole connection cap');
  t.throws(() => sharedBackend(haproxyConfig({ ...input, settings: { ...settings, threads: 2 } }), 4), /changed shape/, 'a configuration written for several threads is refused');
});
