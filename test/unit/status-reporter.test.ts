import t from 'tap';
import { UnitStatusReporter, type ObservedStatus } from '../../src/roles/agent/status-reporter.js';
import type { LeasedWriter } from '../../src/roles/agent/leased-writer.js';

// The agent's unit statuses go to its leased keys (src/store/leased-keys.ts), which keep each
// key's newest value and write it in order; a report must not wait for the slot's previous write.

/** Leased keys whose writes finish only when the test says so. */
function heldWriter() {
  const writes: { key: string; value: string; done: () => void }[] = [];
  const removed: string[] = [];
  const writer: LeasedWriter = {
    set: (key, value) => new Promise<void>((done) => writes.push({ key, value, done })),
    remove: async (key) => {
      removed.push(key);
    },
    forget: () => undefined,
  };
  return { writer, writes, removed };
}

const status = (active: string, sub: string, containerId?: string): ObservedStatus => ({
  unit: 'web-1.service',
  service: 'web',
  instance: 1,
  machine: 'm1',
  release: 1,
  spec: 'abc',
  image: 'registry.test/web@sha256:1',
  active,
  sub,
  ...(containerId ? { containerId } : {}),
  restarts: 0,
}) as ObservedStatus;

t.test('a unit reported running while its start report is still being written goes to the keys at once', async (t) => {
  const { writer, writes } = heldWriter();
  const reporter = new UnitStatusReporter(writer, 'm1');
  const starting = reporter.report(status('activating', 'start-pre', 'c1'));
  const running = reporter.report(status('active', 'running', 'c1'));
  await new Promise((resolve) => setImmediate(resolve));
  t.equal(writes.length, 2, 'both reports reached the keys without the first write finishing');
  t.match(JSON.parse(writes[1]!.value), { active: 'active', sub: 'running' });
  t.equal(reporter.get('web-1.service@abc')?.active, 'active', 'the newest report is what the agent remembers');
  for (const write of writes) write.done();
  await Promise.all([starting, running]);
});

t.test('a report equal to the last one writes nothing; a forgotten slot is removed once', async (t) => {
  const { writer, writes, removed } = heldWriter();
  const reporter = new UnitStatusReporter(writer, 'm1');
  const first = reporter.report(status('active', 'running', 'c1'));
  await new Promise((resolve) => setImmediate(resolve));
  writes[0]!.done();
  await first;
  await reporter.report(status('active', 'running', 'c1'));
  t.equal(writes.length, 1);
  await reporter.forget('web-1.service@abc');
  await reporter.forget('web-1.service@abc');
  t.equal(removed.length, 1);
  t.same(reporter.slots(), []);
});
