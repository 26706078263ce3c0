import { randomBytes } from 'node:crypto';
import { buildTestImage } from '../test/harness/test-image.js';
import { http } from '../test/harness/platform.js';
import { countArgument, median, ms } from './table.js';
import { dockerApiStart, pullImage, startBenchPlatform, type BenchRole } from './bench-platform.js';
import { watchCluster } from './cluster-events.js';

// Where a 10-unit deploy's time goes: the roles run with PLATFORM_TRACE=1 (src/trace.ts) and
// their timestamps are laid beside the bench's own, phase by phase, in milliseconds after the
// POST /hooks/deploy was sent; the floor (create + start of 10 containers through the Docker API)
// runs just before each deploy, with its own steps timed. Wall-clock ratios swing with the
// machine's load; the platform's own milliseconds between phases are steadier.
// TRACE_LINES=1 also prints every trace line of each deploy, in order.
//   node dist/bench/deploy-trace.js [rounds]

const UNITS = 10;
const ROUNDS = countArgument(process.argv[2], 'rounds', 8);
const ROLES: BenchRole[] = ['directory', 'scheduler', 'orchestrator', 'agent'];

interface TraceLine {
  at: number;
  role: string;
  phase: string;
  detail: string;
}

const wall = (): number => performance.timeOrigin + performance.now();

const platform = await startBenchPlatform(ROLES, 'bench', { PLATFORM_TRACE: '1' });
let lines: TraceLine[] = [];
for (const role of ROLES) {
  let buffer = '';
  platform.roles[role]!.child.stderr!.on('data', (chunk: Buffer) => {
    buffer += chunk.toString();
    const parts = buffer.split('\n');
    buffer = parts.pop()!;
    for (const line of parts) {
      const match = /^platform-trace (\S+) (\S+) ?(.*)$/.exec(line);
      if (match) lines.push({ at: Number(match[1]), role, phase: match[2]!, detail: match[3]! });
    }
  });
}
const { engine, registry } = platform;
const image = await buildTestImage(engine.docker, registry.host, 'bench/web', 'v1');
const pinned = `${registry.host}/bench/web@${image.digest}`;
await pullImage(engine, pinned);
const cluster = await watchCluster(platform.url('orchestrator'));

type Phases = Record<string, number | undefined>;

async function tracedDeploy(): Promise<Phases> {
  const service = `bench-${randomBytes(2).toString('hex')}`;
  await http('POST', `${platform.url('directory')}/services`, { name: service, containerImage: `${registry.host}/bench/web`, numInstances: UNITS });
  const running = (units: { service: string; active: string; sub: string }[]) =>
    units.filter((u) => u.service === service && u.active === 'active' && u.sub === 'running').length === UNITS;
  await new Promise((resolve) => setTimeout(resolve, 100));
  lines = [];
  const started = wall();
  const startedMono = performance.now();
  const reply = await http('POST', `${platform.url('scheduler')}/hooks/deploy`, { serviceName: service, containerRepository: image.reference, pushedAt: 0 });
  const replied = wall() - started;
  if (reply.status !== 200) throw new Error(`deploy failed: ${JSON.stringify(reply.body)}`);
  const finished = (await cluster.until(({ units }) => running(units))) - startedMono;
  await new Promise((resolve) => setTimeout(resolve, 200)); // the roles' last trace lines are still in their pipes
  const seen = lines.filter((line) => line.at >= started);
  if (process.env.TRACE_LINES === '1') {
    for (const line of seen.filter((l) => l.at - started < finished)) console.log(`${(line.at - started).toFixed(1)} ${line.role} ${line.phase} ${line.detail}`);
  }
  const of = (phase: string, detail?: (d: string) => boolean) => seen.filter((line) => line.phase === phase && (!detail || detail(line.detail))).map((line) => line.at - started);
  const mine = (d: string) => d.includes(service);
  const runningOf = (d: string) => mine(d) && d.endsWith('active/running');
  const first = (values: number[]) => (values.length ? Math.min(...values) : undefined);
  const last = (values: number[]) => (values.length ? Math.max(...values) : undefined);
  // A per-unit phase: when the first and the last of the ten units reached it.
  const perUnit = (name: string, times: number[]): Phases => ({ [`${name}1`]: first(times), [`${name}10`]: last(times) });
  const txns = seen.filter((line) => line.phase === 'leased.txn' && line.at - started < finished);
  const phases: Phases = {
    hook: first(of('scheduler.hook', mine)),
    accepted: first(of('scheduler.accepted', mine)),
    reply: replied,
    assigned: first(of('scheduler.assignments', mine)),
    watch: first(of('agent.watch')),
    pass: first(of('agent.pass')),
    read: first(of('agent.read')),
    ...perUnit('create', of('agent.create', mine)),
    ...perUnit('created', of('agent.created', mine)),
    ...perUnit('started', of('agent.started', mine)),
    ...perUnit('ready', of('agent.ready', mine)),
    ...perUnit('written', of('agent.status-written', runningOf)),
    ...perUnit('event', of('orchestrator.unit', runningOf)),
    bench: finished,
    passes: of('agent.pass').filter((at) => at < finished).length,
    statusWrites: of('agent.status', mine).length,
    txns: txns.length,
  };
  await http('DELETE', `${platform.url('orchestrator')}/services/${service}`);
  await cluster.until(({ units }) => !units.some((u) => u.service === service));
  return phases;
}

async function tracedFloor(): Promise<Phases> {
  const steps = { created: [] as number[], started: [] as number[] };
  const total = await dockerApiStart(engine, pinned, UNITS, 'unit', (step, elapsed) => steps[step].push(elapsed));
  return { total, created1: Math.min(...steps.created), created10: Math.max(...steps.created), started1: Math.min(...steps.started) };
}

const rounds: { floor: Phases; deploy: Phases }[] = [];
await tracedDeploy(); // warm-up: the image check, the first pass's caches
for (let round = 0; round < ROUNDS; round++) {
  const floor = await tracedFloor();
  const deploy = await tracedDeploy();
  rounds.push({ floor, deploy });
  const fmt = (value: number | undefined) => (value === undefined ? '-' : value.toFixed(0));
  console.log(
    `round ${round + 1}: floor ${Object.entries(floor).map(([name, value]) => `${name} ${fmt(value)}`).join(' ')} | ` +
      Object.entries(deploy)
        .map(([name, value]) => `${name} ${fmt(value)}`)
        .join(' '),
  );
}
const keys = [...new Set(rounds.flatMap((r) => Object.keys(r.deploy)))];
console.log('\nmedian over rounds (ms after the POST was sent):');
for (const key of keys) console.log(`  ${key.padEnd(12)} ${ms(median(rounds.map((r) => r.deploy[key] ?? 0)))}`);
const floors = rounds.map((r) => r.floor.total!);
const deploys = rounds.map((r) => r.deploy.bench!);
console.log(`floor median ${ms(median(floors))}; deploy median ${ms(median(deploys))}; ratio ${(median(deploys) / median(floors)).toFixed(2)}x; ratios per round ${rounds.map((r) => (r.deploy.bench! / r.floor.total!).toFixed(2)).join(', ')}`);
cluster.close();
await platform.stop();
