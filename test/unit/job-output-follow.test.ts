import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import { jobCreate, writeJobRun } from '../../src/store/records/jobs.js';
import { jobOutput } from '../../src/roles/orchestrator/job-output.js';
import type { Job, JobRun } from '../../src/schemas/job.js';

// A followed job's output (`platform run`, `logs --job -f`) follows the job's run record by watch:
// a line shows as soon as the agent writes it, a quiet job costs no store reads, and lines that
// came faster than they were kept are told as a count.

const dir = mkdtempSync(join(tmpdir(), 'job-output-'));
const store = await EmbeddedStore.open(dir);
t.teardown(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Reads of the store (get and list), counted. */
let reads = 0;
const get = store.get.bind(store);
const list = store.list.bind(store);
store.get = (key) => ((reads += 1), get(key));
store.list = (prefix) => ((reads += 1), list(prefix));

async function newJob(id: string): Promise<void> {
  const job: Job = { id, service: 'web', kind: 'run', release: 1, image: 'x', command: ['true'], env: {}, machine: 'm1', timeoutSeconds: 60, createdAt: new Date().toISOString() };
  const { compare, operation } = jobCreate(job);
  await store.txn([compare], [operation]);
}

const run = (id: string, lines: string[], lineCount: number, state: JobRun['state'] = 'running'): JobRun => ({
  id,
  service: 'web',
  machine: 'm1',
  state,
  lines,
  lineCount,
  updatedAt: new Date().toISOString(),
});

/** The text that arrives on `stream`, and a way to wait for some of it. */
function collect(stream: Readable): { text: () => string; until: (pattern: RegExp) => Promise<number> } {
  let text = '';
  const waiters: { pattern: RegExp; resolve: (at: number) => void }[] = [];
  stream.setEncoding('utf8');
  stream.on('data', (chunk: string) => {
    text += chunk;
    for (const waiter of waiters.filter((w) => w.pattern.test(text))) {
      waiters.splice(waiters.indexOf(waiter), 1);
      waiter.resolve(performance.now());
    }
  });
  return {
    text: () => text,
    until: (pattern) => (pattern.test(text) ? Promise.resolve(performance.now()) : new Promise((resolve) => waiters.push({ pattern, resolve }))),
  };
}

t.test('a followed job shows a line as soon as it is written, and a quiet one costs no reads', async (t) => {
  await newJob('quiet');
  await writeJobRun(store, run('quiet', ['first'], 1));
  const stream = await jobOutput(store, 'web', 'quiet', 1000, true);
  const seen = collect(stream);
  await seen.until(/first\n/);
  const before = reads;
  await new Promise((resolve) => setTimeout(resolve, 1500));
  t.equal(reads - before, 0, 'no store read while the job writes nothing');

  const written = performance.now();
  await writeJobRun(store, run('quiet', ['first', 'second'], 2));
  const shown = await seen.until(/second\n/);
  t.ok(shown - written < 50, `the new line comes within 50 ms of its write (${Math.round(shown - written)} ms)`);

  await writeJobRun(store, run('quiet', ['last'], 1503));
  await writeJobRun(store, run('quiet', ['last'], 1503, 'exited'));
  await new Promise((resolve) => stream.once('end', resolve));
  t.equal(seen.text(), 'first\nsecond\n-- 1500 lines not kept --\nlast\n', 'lines beyond those kept are counted, and the stream ends with the job');
});

t.test('a followed job whose output began before it was asked for shows its tail first', async (t) => {
  await newJob('tail');
  await writeJobRun(store, run('tail', ['a', 'b', 'c'], 3, 'exited'));
  const stream = await jobOutput(store, 'web', 'tail', 2, true);
  const seen = collect(stream);
  await new Promise((resolve) => stream.once('end', resolve));
  t.equal(seen.text(), 'b\nc\n');
});

t.test('closing a followed output closes its watch', async (t) => {
  await newJob('closed');
  let open = 0;
  const watchPrefix = store.watchPrefix.bind(store);
  store.watchPrefix = async (prefix, onEvent) => {
    const watch = await watchPrefix(prefix, onEvent);
    open += 1;
    return { close: async () => ((open -= 1), watch.close()) };
  };
  t.teardown(() => void (store.watchPrefix = watchPrefix));
  const stream = await jobOutput(store, 'web', 'closed', 1000, true);
  t.equal(open, 1, 'one watch while it is followed');
  stream.destroy();
  await new Promise((resolve) => setTimeout(resolve, 50));
  t.equal(open, 0, 'none once the reader has gone');
});
