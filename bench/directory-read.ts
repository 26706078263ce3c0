import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { startEtcd } from '../test/harness/etcd.js';
import { freePort } from '../test/harness/free-port.js';
import { http, serveRole } from '../test/harness/platform.js';
import { countArgument, loadAverage, median, pairedRatio, printTable } from './table.js';
import { cpuTicks } from './proxy-cpu.js';

// Issue 29's directory row of bench/spine.ts on its own, without Docker: the directory's
// GET /services/:name (default --auth auto, an anonymous local caller, as spine.ts calls it)
// against a bare Fastify route answering the same JSON, rounds alternating the two so that the
// machine's load falls on both, with each process's CPU time per request (from /proc) beside the
// rates. On a loaded machine both swing widely (perf's instruction counters are not available in
// this VM), so run it more than once and read the rounds.
// `node dist/bench/directory-read.js [ROUNDS]`; PLATFORM_BENCH_BIN runs the directory from another
// launcher (one that starts the inspector's profiler, say).
const ROUNDS = countArgument(process.argv[2], 'ROUNDS', 6);
const SECONDS = 3;

const etcd = await startEtcd();
const directory = await serveRole('directory', await freePort(), ['--etcd', etcd.url], {}, { bin: process.env.PLATFORM_BENCH_BIN || undefined });
const declared = await http('POST', `${directory.url}/services`, { name: 'read-me', containerImage: 'team/web', numInstances: 3, env: { A: '1' } });
if (declared.status !== 201) throw new Error(`declaration failed: ${JSON.stringify(declared.body)}`);
const record = (await http('GET', `${directory.url}/services/read-me`)).body;
const barePort = await freePort();
const bare = spawn(process.execPath, [fileURLToPath(new URL('./bare-server.js', import.meta.url)), JSON.stringify(record), String(barePort)], { stdio: ['ignore', 'pipe', 'inherit'] });
await new Promise((resolve) => bare.stdout!.once('data', resolve));

type Run = { rps: number; cpuMicros: number };
const load = async (url: string, pid: number): Promise<Run> => {
  const before = cpuTicks([pid]);
  const result = await autocannon({ url, connections: 16, duration: SECONDS });
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${url}: ${result.non2xx} non-2xx, ${result.errors} errors`);
  return { rps: result.requests.average, cpuMicros: ((cpuTicks([pid]) - before) * 10_000) / result.requests.total };
};
const series = [
  { name: 'directory', url: `${directory.url}/services/read-me`, pid: directory.child.pid! },
  { name: 'bare', url: `http://127.0.0.1:${barePort}/services/read-me`, pid: bare.pid! },
] as const;
for (const entry of series) await load(entry.url, entry.pid); // warm-up
const runs: Record<'directory' | 'bare', Run[]> = { directory: [], bare: [] };
for (let round = 0; round < ROUNDS; round++) {
  for (const entry of round % 2 === 0 ? series : [...series].reverse()) runs[entry.name].push(await load(entry.url, entry.pid));
  const shown = (run: Run) => `${run.rps.toFixed(0)} req/s ${run.cpuMicros.toFixed(1)} µs`;
  console.log(`round ${round + 1}: directory ${shown(runs.directory.at(-1)!)}, bare ${shown(runs.bare.at(-1)!)}; load ${loadAverage()}`);
}
bare.kill();
await directory.stop();
await etcd.stop();

const rps = (list: Run[]) => median(list.map((run) => run.rps));
const cpu = (list: Run[]) => median(list.map((run) => run.cpuMicros));
printTable([
  {
    benchmark: `directory GET /services/:name (anonymous local caller), req/s: median of ${ROUNDS} rounds' ratios`,
    platform: rps(runs.directory).toFixed(0),
    reference: `${rps(runs.bare).toFixed(0)} (bare Fastify route)`,
    ratio: pairedRatio(runs.directory.map((run) => run.rps), runs.bare.map((run) => run.rps)),
    target: '>= 0.8x',
  },
  {
    benchmark: 'the same, server CPU time per request',
    platform: `${cpu(runs.directory).toFixed(1)} µs`,
    reference: `${cpu(runs.bare).toFixed(1)} µs`,
    ratio: pairedRatio(runs.directory.map((run) => run.cpuMicros), runs.bare.map((run) => run.cpuMicros)),
    target: '-',
  },
]);
console.log(`load average ${loadAverage()}`);
