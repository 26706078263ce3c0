import { readFileSync } from 'node:fs';
import autocannon from 'autocannon';
import { startEtcd } from '../test/harness/etcd.js';
import { freePort } from '../test/harness/free-port.js';
import { http, serveRole } from '../test/harness/platform.js';
import { median, printTable } from './table.js';

// Issue 13's benchmark: the directory's GET /services/:name with a token checked on every call,
// against the same route of a directory under --auth none on the same etcd, in the same run.
// Rounds alternate the two so that the machine's load falls on both alike. Requests per second
// swing with whatever else the machine runs, so the directory's own CPU time per request (from
// /proc) is measured beside them: the cost of the check, whatever the load.

const ROUNDS = 8;
const SECONDS = 3;
const etcd = await startEtcd();
const flags = ['--etcd', etcd.url];
const open = await serveRole('directory', await freePort(), [...flags, '--auth', 'none']);
const guarded = await serveRole('directory', await freePort(), [...flags, '--auth', 'token']);
const orchestrator = await serveRole('orchestrator', await freePort(), [...flags, '--auth', 'token']);

const bootstrap = await http('POST', `${orchestrator.url}/tokens/bootstrap`);
if (bootstrap.status !== 201 && bootstrap.status !== 200) throw new Error(`bootstrap failed: ${JSON.stringify(bootstrap.body)}`);
const admin = { authorization: `Bearer ${(bootstrap.body as { secret: string }).secret}` };
const created = await http('POST', `${orchestrator.url}/tokens`, { name: 'bench-read', role: 'read' }, admin);
if (created.status !== 201 && created.status !== 200) throw new Error(`token create failed: ${JSON.stringify(created.body)}`);
const read = { authorization: `Bearer ${(created.body as { secret: string }).secret}` };

const declared = await http('POST', `${open.url}/services`, { name: 'read-me', containerImage: 'team/web', numInstances: 3, env: { A: '1' } });
if (declared.status !== 201) throw new Error(`declaration failed: ${JSON.stringify(declared.body)}`);
const checked = await http('GET', `${guarded.url}/services/read-me`, undefined, read);
if (checked.status !== 200) throw new Error(`the guarded directory answered ${checked.status}`);
if ((await http('GET', `${guarded.url}/services/read-me`)).status !== 401) throw new Error('the guarded directory answered without a token');

/** CPU seconds a process has used (user + system), from /proc. */
const cpuSeconds = (pid: number): number => {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
};
const load = async (role: typeof open, headers: Record<string, string> = {}) => {
  const cpuBefore = cpuSeconds(role.child.pid!);
  const result = await autocannon({ url: `${role.url}/services/read-me`, headers, connections: 16, duration: SECONDS });
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${role.url}: ${result.non2xx} non-2xx, ${result.errors} errors`);
  return { rps: result.requests.average, cpuMicros: ((cpuSeconds(role.child.pid!) - cpuBefore) / result.requests.total) * 1e6 };
};
await load(open); // warm-up, both
await load(guarded, read);
const openRuns: { rps: number; cpuMicros: number }[] = [];
const guardedRuns: { rps: number; cpuMicros: number }[] = [];
for (let round = 0; round < ROUNDS; round++) {
  // Alternate which goes first, so that neither always runs right after the other.
  if (round % 2) {
    guardedRuns.push(await load(guarded, read));
    openRuns.push(await load(open));
  } else {
    openRuns.push(await load(open));
    guardedRuns.push(await load(guarded, read));
  }
}
const openRps = openRuns.map((run) => run.rps);
const guardedRps = guardedRuns.map((run) => run.rps);
const openCpu = median(openRuns.map((run) => run.cpuMicros));
const guardedCpu = median(guardedRuns.map((run) => run.cpuMicros));

const ratio = median(guardedRps) / median(openRps);
printTable([
  {
    benchmark: `directory GET /services/:name with a read token checked, req/s, median of ${ROUNDS}`,
    platform: median(guardedRps).toFixed(0),
    reference: `${median(openRps).toFixed(0)} (same route, --auth none)`,
    ratio: `${ratio.toFixed(2)}x`,
    target: '>= 0.95x',
  },
  {
    benchmark: `the same, directory CPU time per request, median of ${ROUNDS}`,
    platform: `${guardedCpu.toFixed(0)} µs`,
    reference: `${openCpu.toFixed(0)} µs (--auth none)`,
    ratio: `${(guardedCpu / openCpu).toFixed(2)}x`,
    target: '-',
  },
]);

await Promise.all([open.stop(), guarded.stop(), orchestrator.stop()]);
await etcd.stop();
