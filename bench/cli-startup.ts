import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import type { AddressInfo } from 'node:net';
import { countArgument, loadAverage, median, pairedRatio, printTable, type BenchRow } from './table.js';

// Issue 31: the CPU a client command spends from start to exit (user + system), against Node
// starting and exiting with nothing loaded, in the same rounds. The client talks to a stub
// orchestrator on 127.0.0.1 that answers every request with an empty list, so the figure is the
// CLI's own. `node dist/bench/cli-startup.js ROUNDS [CLI]`: CLI, another build's dist/src/cli.js
// (an older commit's, for a before-and-after).

const ROUNDS = countArgument(process.argv[2], 'ROUNDS', 10);
const cli = process.argv[3] ?? fileURLToPath(new URL('../src/cli.js', import.meta.url));

const orchestrator = createServer((_request, response) => response.writeHead(200, { 'content-type': 'application/json' }).end('[]')).listen(0, '127.0.0.1');
await once(orchestrator, 'listening');
const env = { ...process.env, PLATFORM_ORCHESTRATOR: `http://127.0.0.1:${(orchestrator.address() as AddressInfo).port}` };

/** User + system seconds of this process's waited-for children so far (/proc/self/stat's cutime and cstime, in 1/100 s). */
function childrenCpu(): number {
  const fields = readFileSync('/proc/self/stat', 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[13]) + Number(fields[14])) / 100;
}

/** CPU seconds of one run of node with `args`, whatever its exit status. */
async function cpuOf(args: string[]): Promise<number> {
  const before = childrenCpu();
  const child = execFile(process.execPath, args, { env }, () => undefined);
  await once(child, 'exit');
  return childrenCpu() - before;
}

const commands: { name: string; args: string[] }[] = [
  { name: 'platform services', args: [cli, 'services'] },
  { name: 'platform units', args: [cli, 'units'] },
  { name: 'platform --help', args: [cli, '--help'] },
];
const reference: number[] = [];
const results = new Map(commands.map((command) => [command.name, [] as number[]]));
for (let round = 0; round < ROUNDS; round++) {
  reference.push(await cpuOf(['-e', '0']));
  for (const command of commands) results.get(command.name)!.push(await cpuOf(command.args));
}
orchestrator.close();

const rows: BenchRow[] = commands.map(({ name }) => {
  const cpu = results.get(name)!;
  return {
    benchmark: `${name}: CPU`,
    platform: `${(median(cpu) * 1000).toFixed(0)} ms`,
    reference: `${(median(reference) * 1000).toFixed(0)} ms (node -e 0)`,
    ratio: pairedRatio(cpu, reference),
    target: name === 'platform services' ? '<= 200 ms' : '',
  };
});
console.log(`CLI start-up CPU of ${cli}, ${ROUNDS} rounds, load ${loadAverage()}`);
printTable(rows);
