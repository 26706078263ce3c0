import t from 'tap';
import pino from 'pino';
import type { FastifyBaseLogger } from 'fastify';
import { counterDeltas, nothingCounted, type CounterReading } from '../../src/metrics-history/counter-deltas.js';
import { COUNTERS_COMMAND, HaproxyTrafficCounters, parseCounters } from '../../src/roles/gateway/haproxy-traffic-counters.js';

// The HAProxy plane's request and 5xx counts from HAProxy's cumulative counters: the deltas
// between two readings, whatever reset the counters in between (a reload or restart: a new worker;
// a backend removed and added again), and the interval each reading's counts are recorded into.

const reading = (source: number, rows: Record<string, number[]>): CounterReading => ({ source, rows: new Map(Object.entries(rows)) });

t.test('a delta is what each counter grew by since the last reading; rows that did not move give none', async (t) => {
  const deltas = counterDeltas(reading(7, { 'b_1.0': [100, 3], 'b_1.1': [50, 0] }), reading(7, { 'b_1.0': [130, 5], 'b_1.1': [50, 0] }));
  t.same([...deltas], [['b_1.0', [30, 2]]]);
});

t.test('a counter lower than at the last reading counts from zero: never a negative delta', async (t) => {
  const deltas = counterDeltas(reading(7, { 'b_1.0': [100, 3] }), reading(7, { 'b_1.0': [20, 4] }));
  t.same([...deltas], [['b_1.0', [20, 4]]], 'the whole row: one backend\'s counters are reset together');
});

t.test('another worker (HAProxy reloaded or restarted) counts from zero, even past the old counts', async (t) => {
  const deltas = counterDeltas(reading(7, { 'b_1.0': [100, 3] }), reading(8, { 'b_1.0': [150, 1], 'b_2.0': [4, 0] }));
  t.same(Object.fromEntries(deltas), { 'b_1.0': [150, 1], 'b_2.0': [4, 0] });
});

t.test('a backend read for the first time (added, or removed and added again) counts from zero', async (t) => {
  const deltas = counterDeltas(reading(7, { 'b_1.0': [100, 3] }), reading(7, { 'b_1.0': [100, 3], 'b_9.0': [6, 6] }));
  t.same(Object.fromEntries(deltas), { 'b_9.0': [6, 6] });
});

t.test('without a previous reading nothing is known to be new; before any counting everything is', async (t) => {
  t.same(counterDeltas(undefined, reading(7, { 'b_1.0': [100, 3] })).size, 0, 'an adopted HAProxy: its counts so far were counted by the gateway before');
  t.same(Object.fromEntries(counterDeltas(nothingCounted(), reading(7, { 'b_1.0': [100, 3] }))), { 'b_1.0': [100, 3] }, 'a HAProxy this gateway started');
});

/** A `show info;show stat -1 2 -1` answer: the worker's Pid, then one BACKEND row per backend with `ok` 2xx and `errors` 5xx answers (and a frontend row the filter would leave out). */
function statAnswer(pid: number, backends: Record<string, { ok: number; errors: number; other?: number }>): string {
  const header = '# pxname,svname,req_tot,hrsp_1xx,hrsp_2xx,hrsp_3xx,hrsp_4xx,hrsp_5xx,hrsp_other,';
  const rows = Object.entries(backends).map(([name, { ok, errors, other = 0 }]) => `${name},BACKEND,${ok + errors},0,${ok},0,0,${errors},${other},`);
  return [`Name: HAProxy`, `Version: 2.6.12`, `Pid: ${pid}`, `Uptime_sec: 12`, '', header, 'gateway,FRONTEND,999,0,999,0,0,0,0,', ...rows, ''].join('\n');
}

t.test("HAProxy's answer gives each backend's answers of any status and its 5xx, under its worker's Pid", async (t) => {
  const parsed = parseCounters(statAnswer(4242, { 'b_1.0': { ok: 10, errors: 2, other: 1 }, own: { ok: 5, errors: 0 } }));
  t.equal(parsed.source, 4242);
  t.same(Object.fromEntries(parsed.rows), { 'b_1.0': [13, 2], own: [5, 0] });
  t.throws(() => parseCounters('Unknown command.\n'), /without its Pid/);
  t.equal(COUNTERS_COMMAND, 'show info;show stat -1 2 -1');
});

/** Counters fed by a scripted HAProxy, on a clock the test moves. */
function counters(answers: (() => string)[], routes: Record<string, string>) {
  let now = 1_000_000_005_000;
  const recorded: [string, number, number, number][] = [];
  const counting = new HaproxyTrafficCounters({
    intervalSeconds: 10,
    read: async () => {
      const answer = answers.shift();
      if (answer === undefined) throw new Error('HAProxy does not answer');
      return answer();
    },
    routeOf: (backend) => routes[backend.split('.')[0]!],
    record: (route, at, requests, errors) => recorded.push([route, at, requests, errors]),
    log: pino({ level: 'silent' }) as unknown as FastifyBaseLogger,
    now: () => now,
  });
  return { counting, recorded, setNow: (at: number) => (now = at) };
}

t.test('the counts read once an interval ended are recorded into it, summed over the route\'s thread copies; an adopted HAProxy starts at its first reading', async (t) => {
  const { counting, recorded, setNow } = counters(
    [() => statAnswer(10, { 'b_1.0': { ok: 100, errors: 1 }, 'b_1.1': { ok: 50, errors: 0 } }), () => statAnswer(10, { 'b_1.0': { ok: 130, errors: 2 }, 'b_1.1': { ok: 60, errors: 0 }, 'b_2.0': { ok: 0, errors: 0 } })],
    { b_1: 'web' },
  );
  counting.start(undefined, false);
  counting.stop();
  await counting.upToNow();
  t.same(recorded, [], 'nothing before the interval in progress ends');
  setNow(1_000_000_010_003);
  await counting.upToNow();
  t.same(recorded, [], 'the first reading of an adopted HAProxy is where counting starts');
  setNow(1_000_000_020_001);
  await counting.upToNow();
  await counting.upToNow();
  t.same(recorded, [['web', 1_000_000_010_000, 41, 1]], 'once per interval, into the interval that ended: 31 + 10 answers, 1 of them a 5xx');
});

t.test('a flush records into the interval in progress after closing the finished ones; a failed reading is carried by the next', async (t) => {
  const { counting, recorded, setNow } = counters(
    [
      () => statAnswer(10, { 'b_1.0': { ok: 5, errors: 0 } }),
      () => statAnswer(10, { 'b_1.0': { ok: 8, errors: 0 } }),
      () => {
        throw new Error('HAProxy is reloading');
      },
      () => statAnswer(11, { 'b_1.0': { ok: 4, errors: 4 } }),
    ],
    { b_1: 'web' },
  );
  counting.start(nothingCounted(), true);
  counting.stop();
  setNow(1_000_000_010_500);
  await counting.flush();
  t.same(recorded, [['web', 1_000_000_000_000, 5, 0], ['web', 1_000_000_010_000, 3, 0]], 'the ended interval first, then the one in progress');
  setNow(1_000_000_020_001);
  await counting.upToNow();
  setNow(1_000_000_030_001);
  await counting.upToNow();
  t.same(recorded.at(-1), ['web', 1_000_000_020_000, 8, 4], 'a new worker after the failed reading: its counts from zero');
  t.equal(recorded.length, 3);
});

t.test('counts of a spare backend (no route) are not recorded, but are its baseline once it takes one', async (t) => {
  const routes: Record<string, string> = {};
  const { counting, recorded, setNow } = counters([() => statAnswer(10, { 'b_3.0': { ok: 7, errors: 0 } }), () => statAnswer(10, { 'b_3.0': { ok: 9, errors: 1 } })], routes);
  counting.start(nothingCounted(), true);
  counting.stop();
  setNow(1_000_000_010_001);
  await counting.upToNow();
  t.same(recorded, []);
  routes.b_3 = 'api';
  setNow(1_000_000_020_001);
  await counting.upToNow();
  t.same(recorded, [['api', 1_000_000_010_000, 3, 1]]);
});
