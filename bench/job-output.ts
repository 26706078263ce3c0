import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Readable } from 'node:stream';
import { EmbeddedStore } from '../src/store/embedded-store.js';
import { jobCreate, writeJobRun } from '../src/store/records/jobs.js';
import type { Job, JobRun } from '../src/schemas/job.js';

// Issue 32 item 2: what following a job's output (`platform run`, `logs --job -f`) costs, on the
// embedded store: store reads while the job is quiet for 10 s, and the time from the agent's write
// of its run record to the text being passed on, over 40 writes at random gaps. `node
// dist/bench/job-output.js [MODULE]`: MODULE, another build's dist/src/roles/orchestrator/job-output.js
// (an older commit's, for a before-and-after; docs/jobs.md has both).

type JobOutput = (store: EmbeddedStore, service: string, id: string, tail: number, follow: boolean) => Promise<Readable>;
const module = process.argv[2] ?? fileURLToPath(new URL('../src/roles/orchestrator/job-output.js', import.meta.url));
const { jobOutput } = (await import(module)) as { jobOutput: JobOutput };

const dir = mkdtempSync(join(tmpdir(), 'bench-job-output-'));
const store = await EmbeddedStore.open(dir);
let reads = 0;
const get = store.get.bind(store);
store.get = (key) => ((reads += 1), get(key));

const job: Job = { id: 'j', service: 'web', kind: 'run', release: 1, image: 'x', command: ['true'], env: {}, machine: 'm1', timeoutSeconds: 60, createdAt: new Date().toISOString() };
const { compare, operation } = jobCreate(job);
await store.txn([compare], [operation]);
const run = (count: number): JobRun => ({
  id: 'j', service: 'web', machine: 'm1', state: 'running', lines: Array.from({ length: count }, (_, i) => `line ${i + 1}`), lineCount: count, updatedAt: new Date().toISOString(),
});
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

await writeJobRun(store, run(1));
const stream = await jobOutput(store, 'web', 'j', 1000, true);
let text = '';
let seen: (() => void) | undefined;
stream.setEncoding('utf8');
stream.on('data', (chunk: string) => ((text += chunk), seen?.()));
await pause(300);
const before = reads;
await pause(10_000);
const idleReads = reads - before;

const latencies: number[] = [];
for (let count = 2; count <= 41; count++) {
  await pause(37 + Math.random() * 100);
  const written = performance.now();
  const shown = new Promise<number>((resolve) => (seen = () => text.includes(`line ${count}\n`) && resolve(performance.now())));
  await writeJobRun(store, run(count));
  latencies.push((await shown) - written);
}
latencies.sort((a, b) => a - b);
const at = (share: number) => latencies[Math.min(latencies.length - 1, Math.floor(share * latencies.length))]!.toFixed(1);
console.log(`store reads in a quiet 10 s: ${idleReads}; write to text: p50 ${at(0.5)} ms, p90 ${at(0.9)} ms, max ${at(1)} ms`);
stream.destroy();
await store.close();
rmSync(dir, { recursive: true, force: true });
