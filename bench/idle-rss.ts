import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { startEtcd } from '../test/harness/etcd.js';
import { startDockerd } from '../test/harness/docker.js';
import { freePort } from '../test/harness/free-port.js';
import { nodeFlagsOf, platformBin, serveRole } from '../test/harness/platform.js';
import { countArgument, loadAverage, median } from './table.js';
import { memoryOf, processMemory, type RoleMemory } from './role-metrics.js';

// Issue 29: every role <= 100 MiB idle. Each of the directory, scheduler, orchestrator and agent
// alone as `platform serve --role R` on a real etcd (and dockerd, for the agent), its memory
// SETTLE_MS after it first answered /healthz; beside them, in the same rounds, Node doing nothing
// and a bare Fastify server (bench/bare-server.ts), both with the launcher's Node flags.
// `node dist/bench/idle-rss.js [ROUNDS] [BIN...]`: each BIN (another build's bin/platform, such as
// a scratch worktree of main's) is measured in the same rounds, alternating with this one.

const ROUNDS = countArgument(process.argv[2], 'ROUNDS', 2);
const builds = [platformBin, ...process.argv.slice(3).map((bin) => resolve(bin))];
const ROLES = ['directory', 'scheduler', 'orchestrator', 'agent'] as const;
/** After /healthz: long enough for a role's start-up work (first store reads, announcements) to end. */
const SETTLE_MS = 4000;

console.log(`load average at the start: ${loadAverage()}`);
const [etcd, engine] = await Promise.all([startEtcd(), startDockerd()]);

/** A reference: `args` run by Node with the launcher's flags, measured SETTLE_MS after `ready` resolves. */
async function reference(args: string[], ready: (child: ChildProcess) => Promise<void>): Promise<RoleMemory> {
  const child = spawn(process.execPath, [...nodeFlagsOf(platformBin), ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    await ready(child);
    await sleep(SETTLE_MS);
    return processMemory(child.pid!);
  } finally {
    child.kill();
    await once(child, 'exit');
  }
}

const idleNode = () => reference(['-e', 'setInterval(() => {}, 1e6)'], () => sleep(500));
const bareFastify = async () => {
  const port = await freePort();
  const server = fileURLToPath(new URL('./bare-server.js', import.meta.url));
  return reference([server, '{}', String(port)], (child) => once(child.stdout!, 'data').then(() => undefined));
};

async function idleRole(bin: string, role: (typeof ROLES)[number]): Promise<RoleMemory> {
  const agentFlags = ['--network', 'host', '--machine-id', `idle-rss-${Math.random().toString(36).slice(2, 8)}`];
  const started = await serveRole(role, await freePort(), ['--etcd', etcd.url, ...(role === 'agent' ? agentFlags : [])], role === 'agent' ? { DOCKER_HOST: engine.dockerHost } : {}, { bin });
  try {
    await sleep(SETTLE_MS);
    return await memoryOf(started.child.pid!, started.url);
  } finally {
    await started.stop();
  }
}

const samples = new Map<string, RoleMemory[]>();
const record = (name: string, memory: RoleMemory) => samples.set(name, [...(samples.get(name) ?? []), memory]);
const buildName = (bin: string, index: number) => (index === 0 ? 'this build' : `build ${index} (${bin})`);
for (let round = 0; round < ROUNDS; round++) {
  record('node, idle (reference)', await idleNode());
  record('bare Fastify server (reference)', await bareFastify());
  // Builds alternate their order from round to round, so that a drift of the machine falls on both.
  const order = builds.map((bin, index) => ({ bin, index }));
  if (round % 2 === 1) order.reverse();
  for (const { bin, index } of order) {
    for (const role of ROLES) record(`${role}, ${buildName(bin, index)}`, await idleRole(bin, role));
  }
  console.log(`round ${round + 1} of ${ROUNDS} done, load ${loadAverage()}`);
}
await engine.stop();
await etcd.stop();

// One row per process kind: the median of the rounds for each column, and every round's RSS.
const mib = (bytes: number | undefined) => (bytes === undefined ? '-' : (bytes / 2 ** 20).toFixed(1));
const columns: [string, (memory: RoleMemory) => number | undefined][] = [
  ['RSS', (m) => m.rss],
  ['anon', (m) => m.rssAnon],
  ['file', (m) => m.rssFile],
  ['heap used', (m) => m.heapUsed],
  ['heap total', (m) => m.heapTotal],
  ['new space size', (m) => m.newSpace],
  ['old space', (m) => m.oldSpace],
  ['code', (m) => m.codeSpace],
  ['large objects', (m) => m.largeObjects],
  ['external', (m) => m.external],
];
const medianOf = (list: RoleMemory[], read: (memory: RoleMemory) => number | undefined) => {
  const values = list.map(read).filter((value): value is number => value !== undefined);
  return values.length ? median(values) : undefined;
};
const header = ['process (MiB, median of rounds)', ...columns.map(([name]) => name), 'RSS each round'];
const rows = [...samples].map(([name, list]) => [name, ...columns.map(([, read]) => mib(medianOf(list, read))), list.map((m) => mib(m.rss)).join(', ')]);
const widths = header.map((title, i) => Math.max(title.length, ...rows.map((row) => row[i]!.length)));
const line = (cells: string[]) => `| ${cells.map((cell, i) => cell.padEnd(widths[i]!)).join(' | ')} |`;
console.log(line(header));
console.log(`|${widths.map((width) => '-'.repeat(width + 2)).join('|')}|`);
for (const row of rows) console.log(line(row));
console.log(`target: each role <= 100 MiB RSS idle; load average at the end: ${loadAverage()}`);
