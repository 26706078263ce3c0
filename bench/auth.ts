import autocannon from 'autocannon';
import { startEtcd } from '../test/harness/etcd.js';
import { freePort } from '../test/harness/free-port.js';
import { http, serveRole } from '../test/harness/platform.js';
import { countArgument, loadAverage, median, pairedRatio, printTable } from './table.js';
import { cpuTicks } from './proxy-cpu.js';

// Issue 13's benchmark: the directory's GET /services/:name with a token checked on every call,
// against the same route of a directory under --auth none on the same etcd, in the same run.
// Rounds alternate the two so that the machine's load falls on both alike. Requests per second
// swing with whatever else the machine runs, so the directory's own CPU time per request (from
// /proc) is measured beside them: the cost of the check, whatever the load.
// The reference is sent the same request bytes, the read token's Authorization header included
// (--auth none ignores it), so that the comparison is of the check, not of parsing one more
// header; the reference without the header, the method before 2026-11-23, is measured beside it.

// A run is 4 blocks of 3 rounds. Each block starts fresh directories: one process runs a few per
// cent faster or slower than another for the whole of its life (two --auth none processes
// measured 19.7 and 21.6 µs a request in one run), so a single pair cannot show a 5 % margin.
// Each series has a process of its own, so each works one turn in three and idles alike (until
// 2026-11-24 the reference served both unchecked series and idled 3 s between turns, the checked
// directory 6 s).
// Within a block each round runs the series back to back, and the ratio is the median of the
// rounds' own ratios: a burst of load elsewhere falls on one round's pair, not on one series.
const BLOCKS = countArgument(process.argv[2], 'BLOCKS', 4); // `node dist/bench/auth.js BLOCKS`
const ROUNDS_PER_BLOCK = 3;
const ROUNDS = BLOCKS * ROUNDS_PER_BLOCK;
const SECONDS = 3;
const etcd = await startEtcd();
const flags = ['--etcd', etcd.url];
const orchestrator = await serveRole('orchestrator', await freePort(), [...flags, '--auth', 'token']);

const bootstrap = await http('POST', `${orchestrator.url}/tokens/bootstrap`);
if (bootstrap.status !== 201 && bootstrap.status !== 200) throw new Error(`bootstrap failed: ${JSON.stringify(bootstrap.body)}`);
const admin = { authorization: `Bearer ${(bootstrap.body as { secret: string }).secret}` };
const created = await http('POST', `${orchestrator.url}/tokens`, { name: 'bench-read', role: 'read' }, admin);
if (created.status !== 201 && created.status !== 200) throw new Error(`token create failed: ${JSON.stringify(created.body)}`);
const read = { authorization: `Bearer ${(created.body as { secret: string }).secret}` };

type Directory = Awaited<ReturnType<typeof serveRole>>;
const startDirectories = async (): Promise<{ open: Directory; bare: Directory; guarded: Directory }> => ({
  open: await serveRole('directory', await freePort(), [...flags, '--auth', 'none']),
  bare: await serveRole('directory', await freePort(), [...flags, '--auth', 'none']),
  guarded: await serveRole('directory', await freePort(), [...flags, '--auth', 'token']),
});
const assertChecked = async (guarded: Directory) => {
  const checked = await http('GET', `${guarded.url}/services/read-me`, undefined, read);
  if (checked.status !== 200) throw new Error(`the guarded directory answered ${checked.status}`);
  if ((await http('GET', `${guarded.url}/services/read-me`)).status !== 401) throw new Error('the guarded directory answered without a token');
};

/** CPU seconds a process has used (user + system), from /proc. */
const cpuSeconds = (pid: number): number => cpuTicks([pid]) / 100;
const load = async (role: Directory, headers: Record<string, string> = {}) => {
  const cpuBefore = cpuSeconds(role.child.pid!);
  const result = await autocannon({ url: `${role.url}/services/read-me`, headers, connections: 16, duration: SECONDS });
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${role.url}: ${result.non2xx} non-2xx, ${result.errors} errors`);
  return { rps: result.requests.average, cpuMicros: ((cpuSeconds(role.child.pid!) - cpuBefore) / result.requests.total) * 1e6 };
};
type Run = { rps: number; cpuMicros: number };
type Series = 'guarded' | 'open' | 'bare';
const measured: Record<Series, Run[]> = { guarded: [], open: [], bare: [] };
for (let block = 0; block < BLOCKS; block++) {
  const { open, bare, guarded } = await startDirectories();
  if (block === 0) {
    const declared = await http('POST', `${open.url}/services`, { name: 'read-me', containerImage: 'team/web', numInstances: 3, env: { A: '1' } });
    if (declared.status !== 201) throw new Error(`declaration failed: ${JSON.stringify(declared.body)}`);
  }
  await assertChecked(guarded);
  const series: { name: Series; role: Directory; headers: Record<string, string> }[] = [
    { name: 'guarded', role: guarded, headers: read },
    { name: 'open', role: open, headers: read },
    { name: 'bare', role: bare, headers: {} },
  ];
  for (const { role, headers } of series) await load(role, headers); // warm-up, each
  for (let round = 0; round < ROUNDS_PER_BLOCK; round++) {
    // Rotate the order, so that none always runs right after another.
    const turn = block * ROUNDS_PER_BLOCK + round;
    const order = [...series.slice(turn % series.length), ...series.slice(0, turn % series.length)];
    for (const entry of turn % 2 ? order.reverse() : order) measured[entry.name].push(await load(entry.role, entry.headers));
  }
  await Promise.all([open.stop(), bare.stop(), guarded.stop()]);
}
const { guarded: guardedRuns, open: openRuns, bare: bareRuns } = measured;
const rps = (runs: Run[]) => median(runs.map((run) => run.rps));
const cpu = (runs: Run[]) => median(runs.map((run) => run.cpuMicros));
/** The median of the rounds' own ratios of the checked directory over `over` (each round runs the two back to back), and their range. */
const ratioTo = (value: (run: Run) => number, over: Run[]) => pairedRatio(guardedRuns.map(value), over.map(value));

printTable([
  {
    benchmark: `directory GET /services/:name with a read token checked, req/s: median of ${ROUNDS} rounds' ratios (${BLOCKS} sets of processes)`,
    platform: rps(guardedRuns).toFixed(0),
    reference: `${rps(openRuns).toFixed(0)} (same route and request, --auth none)`,
    ratio: ratioTo((run) => run.rps, openRuns),
    target: '>= 0.95x',
  },
  {
    benchmark: `the same, directory CPU time per request: median of ${ROUNDS} rounds' ratios (${BLOCKS} sets of processes)`,
    platform: `${cpu(guardedRuns).toFixed(1)} µs`,
    reference: `${cpu(openRuns).toFixed(1)} µs`,
    ratio: ratioTo((run) => run.cpuMicros, openRuns),
    target: '-',
  },
  {
    benchmark: 'the same against a reference sent no Authorization header (the earlier method), req/s',
    platform: rps(guardedRuns).toFixed(0),
    reference: `${rps(bareRuns).toFixed(0)} (CPU ${cpu(bareRuns).toFixed(1)} µs)`,
    ratio: `${ratioTo((run) => run.rps, bareRuns)}, CPU ${ratioTo((run) => run.cpuMicros, bareRuns)}`,
    target: '-',
  },
]);
console.log(`load average ${loadAverage()}`);

await orchestrator.stop();
await etcd.stop();
