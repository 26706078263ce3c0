import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { freePort } from '../test/harness/free-port.js';
import { ensureCommand } from '../test/harness/system-packages.js';
import { makeServerCertificate } from '../test/harness/tls-certificates.js';
import { countArgument, median } from './table.js';
import { processCpuNanoseconds, userSystemTicks } from './proxy-cpu.js';
import { GATEWAY_POLICY, referenceConfig } from './reference-haproxy.js';
import { writeGeneratedConfig, type BackendLayout } from './generated-haproxy.js';
import { haproxyFiles } from '../src/roles/gateway/haproxy-data-plane.js';
import { threadCommands } from '../src/roles/gateway/haproxy-config.js';
import { runtimeCommands } from '../src/roles/gateway/haproxy-runtime.js';
import { waitFor } from '../test/harness/wait.js';

// Where the HAProxy data plane's CPU per request goes, counted in instructions rather than timed:
// HAProxy runs under valgrind's callgrind, which counts every instruction it executes, so a
// configuration's cost per request is the same whatever else the machine runs (two runs of one
// configuration differ by about 0.1 %, where CPU time per request on the shared machine moved ±5 %
// between rounds). The generated configuration (haproxyConfig, as the gateway writes it) is
// measured as it is and with one thing taken out or changed at a time, beside hand-written ones.
// Two kinds of traffic:
// - `tls` (the default): keep-alive requests over TLS to three local Node keep-alive servers.
// - `close`: plain HTTP to three busybox httpd units, which close the connection after every
//   response as the busybox units of bench/gateway.ts do, so HAProxy opens a server connection per
//   request; the client keeps its connections alive, as autocannon does there.
// Instructions are not time: callgrind's own memcpy counts about 2 instructions per byte, where
// the CPU's copies 64 bytes at a time, so a copy weighs more here than on the CPU (perf on the
// running proxies, docs/gateway.md, gives its share of the time). Kernel work is not counted, and
// a connection per request is mostly kernel work: `cpu` instead runs every configuration at once,
// natively, loads them in alternating rounds and reads each one's CPU time per request, user and
// kernel, from /proc (load-dependent: compare the rows of one run, not runs).
// `node dist/bench/haproxy-instructions.js [tls|close] [cpu|syscalls] [REQUESTS] [only=REGEX] [rounds=N]`: about 2 minutes a
// kind (cpu: 5 minutes under load); `only` keeps the variants whose name matches, `rounds` and
// `connections` set cpu's rounds and client connections (bench/gateway.ts loads 32).

const args = process.argv.slice(2);
const unknown = args.filter((arg) => !['tls', 'close', 'cpu', 'syscalls'].includes(arg) && !/^\d+$/.test(arg) && !/^(only|rounds|connections)=./.test(arg));
if (unknown.length > 0) throw new Error(`unknown argument ${unknown.join(', ')}: tls or close, cpu or syscalls, a number of requests, only=REGEX, rounds=N, connections=N`);
const KIND: Kind = args.includes('close') ? 'close' : 'tls';
const CPU = args.includes('cpu');
const SYSCALLS = args.includes('syscalls');
const REQUESTS = countArgument(args.find((arg) => /^\d+$/.test(arg)), 'REQUESTS', 1000);
const option = (name: string): string | undefined => args.find((arg) => arg.startsWith(`${name}=`))?.slice(name.length + 1);
/** Only the variants whose name matches (the generated configuration, the first, always runs: the others are compared with it). */
const ONLY = new RegExp(option('only') ?? '');
const HOST = 'svc.platform.local';
const dir = mkdtempSync(join(tmpdir(), 'platform-bench-instructions-'));
const children: ChildProcess[] = [];
const killAll = () => children.forEach((child) => child.kill('SIGKILL'));
process.once('exit', killAll);

type Kind = 'tls' | 'close';

/** Free ports for a configuration's binds: the TLS one and the gateway's plain one. */
interface Ports {
  tls: number;
  plain: number;
}

/** The port a kind's requests go to. */
const measuredPort = (ports: Ports): number => (KIND === 'tls' ? ports.tls : ports.plain);

/** A configuration, written into its own directory. */
type Variant = (root: string, ports: Ports) => string;

const unitScript = "require('node:http').createServer((req, res) => { res.setHeader('content-type', 'text/html'); res.end('unit ' + process.env.PORT + '\\n'); }).listen(Number(process.env.PORT), '127.0.0.1');";

/** Three units on loopback: Node keep-alive servers (`tls`), or busybox httpd, a fork per connection, as the test image's (`close`). */
async function startUnits(): Promise<string[]> {
  const addresses: string[] = [];
  for (let i = 0; i < 3; i++) {
    const port = await freePort();
    if (KIND === 'tls') {
      children.push(spawn(process.execPath, ['-e', unitScript], { env: { PORT: String(port) }, stdio: 'ignore' }));
    } else {
      const home = join(dir, `unit-${i}`);
      mkdirSync(home);
      writeFileSync(join(home, 'index.html'), `unit ${port}\n`);
      children.push(spawn('busybox', ['httpd', '-f', '-p', `127.0.0.1:${port}`, '-h', home], { stdio: 'ignore' }));
    }
    addresses.push(`127.0.0.1:${port}`);
  }
  return addresses;
}

/** A PEM bundle (chain and key) for `names`. */
function pemFor(name: string, names: string[]): string {
  const certificate = makeServerCertificate(dir, name, names);
  const pem = join(dir, `${name}.pem`);
  writeFileSync(pem, readFileSync(certificate.cert, 'utf8') + readFileSync(certificate.key, 'utf8'));
  return pem;
}

/** The gateway's configuration for one public service on three units, with its default settings, and its TLS bind with `tls` (the `tls` kind's). */
function planeConfig(addresses: string[], layout: BackendLayout = 'per-thread', tls = KIND === 'tls'): Variant {
  const pems = tls ? { host: pemFor('host', [`*.platform.local`]), placeholder: pemFor('placeholder', ['placeholder.invalid']) } : undefined;
  return (root, ports) => {
    const crtList = join(root, 'certs.list');
    if (pems !== undefined) writeFileSync(crtList, `${pems.placeholder} placeholder.invalid\n${pems.host} ${HOST}\n`);
    // Nothing here asks for the gateway's own endpoints (ownPort).
    const route = { service: 'svc', host: HOST, addresses, port: ports.plain, ownPort: 1, ...(pems === undefined ? {} : { tls: { host: '127.0.0.1', port: ports.tls, crtList, domain: 'platform.local' } }) };
    return writeGeneratedConfig(root, route, layout).config;
  };
}

/** A hand-written configuration with `backend`'s balancing lines, on the measured port. */
const handWritten =
  (addresses: string[], backend?: readonly string[]): Variant =>
  (_root, ports) =>
    referenceConfig(measuredPort(ports), addresses, KIND === 'tls' ? `ssl crt ${join(dir, 'host.pem')} ssl-min-ver TLSv1.2 ssl-max-ver TLSv1.3` : '', backend);

/** The variant without the lines `pattern` matches (some must). */
const without =
  (variant: Variant, pattern: RegExp): Variant =>
  (root, ports) => {
    const lines = variant(root, ports).split('\n');
    const kept = lines.filter((line) => !pattern.test(line));
    if (kept.length === lines.length) throw new Error(`no line matches ${pattern} in the generated configuration`);
    return kept.join('\n');
  };

/** The variant with `pattern` replaced (it must occur). */
const changed =
  (variant: Variant, pattern: RegExp, replacement: string): Variant =>
  (root, ports) => {
    const config = variant(root, ports);
    if (!pattern.test(config)) throw new Error(`nothing matches ${pattern} in the generated configuration`);
    return config.replace(pattern, replacement);
  };

/** The frontend's `http-request`/`http-response`/`http-after-response` rules but those `keep` matches. */
const frontendRulesOnly =
  (variant: Variant, keep: RegExp): Variant =>
  (root, ports) => {
    let frontend = false;
    return variant(root, ports)
      .split('\n')
      .filter((line) => {
        if (/^\S/.test(line)) frontend = line.startsWith('frontend ');
        return !frontend || !/^\s+http-(request|response|after-response) /.test(line) || keep.test(line);
      })
      .join('\n');
  };

/** Runtime API commands a variant's HAProxy gets once it runs, before it is measured. */
const runtimeSetup = new WeakMap<Variant, string[]>();

/**
 * The variant with its units' slots written free (disabled, as the plane starts them) and given
 * their units through the Runtime API as the gateway does (haproxy-slots.ts: `set server … addr`,
 * `state ready`, for each thread's copy), so a server set at runtime can be compared with one read
 * from the file.
 */
function throughRuntimeApi(variant: Variant, addresses: string[]): Variant {
  const runtime: Variant = (root, ports) => {
    const config = variant(root, ports);
    const threads = Number(/^\s+nbthread (\d+)$/m.exec(config)?.[1] ?? 1);
    const commands = addresses.flatMap((address, i) => [`set server b_0/b_0-${i + 1} addr 127.0.0.1 port ${address.split(':')[1]}`, `set server b_0/b_0-${i + 1} state ready`]);
    runtimeSetup.set(runtime, threadCommands(commands, threads));
    return addresses.reduce((freed, address) => freed.replace(new RegExp(` ${address.replace(/\./g, '\\.')} maxconn`, 'g'), ' 127.0.0.1:1 disabled maxconn'), config);
  };
  return runtime;
}

/** The variant run as the gateway runs it (asTheGatewayRunsIt). */
function masterWorker(variant: Variant): Variant {
  const wrapped: Variant = (root, ports) => variant(root, ports);
  asTheGatewayRunsIt.add(wrapped);
  return wrapped;
}

/** The variants both kinds measure, after the generated configuration itself. */
const commonVariants = (plane: Variant): [string, Variant][] => [
  ['  without the L7 retry (retry-on conn-failure only)', changed(plane, /retry-on conn-failure empty-response/g, 'retry-on conn-failure')],
  ['  with 16 KiB buffers (no room for the 431 answer)', without(plane, /tune\.bufsize/)],
  ['  without the frontend rules (routing kept)', frontendRulesOnly(plane, /set-var\(txn\.(host|backend)\)/)],
  ['  without the per-address cap and the 431 check', without(plane, /stick-table|track-sc0|sc0_conn_cur|req\.hdrs,length/)],
  ['  with balance roundrobin', changed(plane, /balance leastconn/g, 'balance roundrobin')],
];

const tlsVariants = (plane: Variant): [string, Variant][] => [
  ...commonVariants(plane),
  ['  without X-Forwarded-For', without(plane, /x-forwarded-for|xff_count/)],
  ['  without X-Forwarded-Proto', without(plane, /x-forwarded-proto/)],
  ['  without X-Forwarded-Host', without(plane, /x-forwarded-host/)],
  ['  without the hop-by-hop header removals', without(plane, /-m reg( if routed)?$/)],
  ['  without the Connection-named header check', without(plane, /names_headers/)],
];

/** What a new server connection per request could meet: per-connection options, the backend's servers and answers. */
const closeVariants = (plane: Variant, shared: Variant, addresses: string[]): [string, Variant][] => [
  ['  one backend shared by the threads (no per-thread copies)', shared],
  ['  its units set through the Runtime API, as the gateway sets them', throughRuntimeApi(plane, addresses)],
  ['  with the gateway\'s TLS bind beside (crt-list, strict-sni; not asked)', planeConfig(addresses, 'per-thread', true)],
  // callgrind would follow the master, not its worker.
  ...(CPU || SYSCALLS ? [['  run as the gateway runs it (master-worker, -W -S)', masterWorker(plane)] as [string, Variant]] : []),
  ...commonVariants(plane),
  ['  without option srvtcpka', without(plane, /option srvtcpka/)],
  ['  without option clitcpka', without(plane, /option clitcpka/)],
  ['  without the per-server maxconn', changed(plane, / maxconn \d+$/gm, '')],
  ['  without the disabled spare servers', without(plane, /^\s+server \S+ 127\.0\.0\.1:1 disabled/)],
  ['  without the stick table (per-address cap)', without(plane, /stick-table|track-sc0|sc0_conn_cur/)],
  ['  without Lua (lua-load and its actions)', without(plane, /lua/)],
  ['  without the backend 503 answers (http-request return)', without(plane, /^\s+http-request return status 503 .*nbsrv/)],
  ['  without the http-error answers (502, 504)', without(plane, /^\s+http-error /)],
  ['  without option redispatch', without(plane, /option redispatch/)],
  ['  without the extra timeouts (queue, http-request, keep-alive, tunnel)', without(plane, /timeout (queue|http-request|http-keep-alive|tunnel)/)],
  ['hand-written, gateway policy (leastconn, L7 retry)', handWritten(addresses, GATEWAY_POLICY)],
];

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** `amount` requests (or `duration` seconds of them) on `connections` keep-alive connections; throws unless all answered 2xx. */
async function requests(port: number, load: { amount: number } | { duration: number }, connections = 4): Promise<number> {
  const url = `${KIND === 'tls' ? 'https' : 'http'}://127.0.0.1:${port}/`;
  const result = await autocannon({ url, ...load, connections, timeout: 60, headers: { host: HOST }, ...(KIND === 'tls' ? { servername: HOST } : {}) } as autocannon.Options);
  const total = result['2xx'] + result.non2xx + result.errors + result.timeouts;
  if (result['2xx'] !== total || ('amount' in load && total !== load.amount)) throw new Error(`port ${port}: ${result['2xx']} of ${total} answered 2xx (${result.errors} errors, ${result.non2xx} non-2xx)`);
  return result['2xx'];
}

/** Waits until HAProxy answers on `port`; a timeout carries the end of its stderr. */
async function answering(name: string, port: number, stderr: () => string): Promise<void> {
  await waitFor(() => requests(port, { amount: 8 }), 60_000, { intervalMs: 1000, what: `${name}: HAProxy to answer` }).catch((error: unknown) => {
    throw new Error(`${(error as Error).message}: ${stderr().slice(-2000)}`);
  });
}

/** Variants HAProxy runs as the gateway runs it (haproxy-process.ts): master-worker, with a master CLI socket. */
const asTheGatewayRunsIt = new WeakSet<Variant>();

/** The process that proxies: `child` itself, or the worker its master forked. */
async function proxyingPid(child: ChildProcess, masterWorker: boolean): Promise<number> {
  if (!masterWorker) return child.pid!;
  return waitFor(() => Number(readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, 'utf8').trim().split(/\s+/)[0]) || undefined, 10_000, { what: 'the HAProxy worker' });
}

/**
 * HAProxy on `variant`'s configuration in its own directory, under `wrapper`'s command if given;
 * resolves once it answers, with the pid of the process that proxies.
 */
async function startHaproxy(name: string, variant: Variant, wrapper: (root: string) => string[] = () => []): Promise<{ child: ChildProcess; root: string; port: number; pid: number }> {
  const root = mkdtempSync(join(dir, 'haproxy-'));
  const ports = { tls: await freePort(), plain: await freePort() };
  writeFileSync(join(root, 'haproxy.cfg'), variant(root, ports));
  const masterWorker = asTheGatewayRunsIt.has(variant);
  const command = [...wrapper(root), '/usr/sbin/haproxy', ...(masterWorker ? ['-W', '-S', `${join(root, 'master.sock')},mode,600`] : []), '-f', join(root, 'haproxy.cfg'), '-db'];
  const child = spawn(command[0]!, command.slice(1), { stdio: ['ignore', 'ignore', 'pipe'] });
  children.push(child);
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const setup = runtimeSetup.get(variant);
  if (setup !== undefined) {
    const socket = haproxyFiles(root).runtimeSocket;
    const failures = await waitFor(() => runtimeCommands(socket, setup).catch(() => undefined), 60_000, { what: `${name}: HAProxy's runtime socket` });
    if (failures.length > 0) throw new Error(`${name}: HAProxy refused ${JSON.stringify(failures)}`);
  }
  await answering(name, measuredPort(ports), () => stderr);
  return { child, root, port: measuredPort(ports), pid: await proxyingPid(child, masterWorker) };
}

/** Instructions HAProxy executes per request with `variant`, counted by callgrind after a warm-up. */
async function instructionsPerRequest(name: string, variant: Variant): Promise<number> {
  const { child, root, port } = await startHaproxy(name, variant, (root) => ['valgrind', '--tool=callgrind', `--callgrind-out-file=${join(root, 'callgrind.out')}`]);
  try {
    await requests(port, { amount: 400 });
    execFileSync('callgrind_control', ['--zero', String(child.pid)], { stdio: 'ignore' });
    await requests(port, { amount: REQUESTS });
    execFileSync('callgrind_control', ['--dump', String(child.pid)], { stdio: 'ignore' });
    const dumps = readdirSync(root).filter((file) => file.startsWith('callgrind.out.'));
    const instructions = dumps.reduce((sum, file) => sum + Number(/^summary: (\d+)/m.exec(readFileSync(join(root, file), 'utf8'))?.[1] ?? NaN), 0);
    if (dumps.length === 0 || !Number.isFinite(instructions)) throw new Error(`${name}: no callgrind dump`);
    return instructions / REQUESTS;
  } finally {
    child.kill('SIGKILL');
  }
}

const CPU_ROUNDS = countArgument(option('rounds'), 'rounds', 5);
const CPU_ROUND_S = 3;
const CPU_CONNECTIONS = countArgument(option('connections'), 'connections', 8);

/**
 * CPU time per request of every variant, run natively side by side, each loaded in turn for
 * CPU_ROUND_S in CPU_ROUNDS rounds (each round starting one variant later): the median of its
 * rounds, and the share of its time spent in the kernel over all rounds.
 */
async function cpuPerRequest(variants: [string, Variant][]): Promise<{ us: number; low: number; high: number; kernel: number }[]> {
  const running = [];
  for (const [name, variant] of variants) running.push(await startHaproxy(name.trim(), variant));
  const perRound: number[][] = variants.map(() => []);
  const ticks = variants.map(() => [0, 0]);
  for (const { port } of running) await requests(port, { duration: 1 }, CPU_CONNECTIONS);
  for (let round = 0; round < CPU_ROUNDS; round++) {
    for (let turn = 0; turn < variants.length; turn++) {
      const i = (turn + round) % variants.length;
      const pid = running[i]!.pid;
      const [nanoseconds, [user, system]] = [processCpuNanoseconds(pid), userSystemTicks(pid)];
      const answered = await requests(running[i]!.port, { duration: CPU_ROUND_S }, CPU_CONNECTIONS);
      const [userAfter, systemAfter] = userSystemTicks(pid);
      perRound[i]!.push((processCpuNanoseconds(pid) - nanoseconds) / 1000 / answered);
      ticks[i] = [ticks[i]![0]! + userAfter - user, ticks[i]![1]! + systemAfter - system];
    }
  }
  running.forEach(({ child }) => child.kill('SIGKILL'));
  return perRound.map((rounds, i) => ({ us: median(rounds), low: Math.min(...rounds), high: Math.max(...rounds), kernel: ticks[i]![1]! / Math.max(1, ticks[i]![0]! + ticks[i]![1]!) }));
}

/** Per request, each system call HAProxy makes with `variant` (perf's syscall tracepoints on the native process, after a warm-up). */
async function syscallsPerRequest(name: string, variant: Variant): Promise<Map<string, number>> {
  const { child, root, port, pid } = await startHaproxy(name, variant);
  const out = join(root, 'perf.csv');
  try {
    await requests(port, { amount: 400 });
    const perf = spawn('perf', ['stat', '-x', ',', '-o', out, '-e', 'syscalls:sys_enter_*', '-p', String(pid)], { stdio: 'ignore' });
    children.push(perf);
    // perf attaches to every tracepoint before it counts: a moment before the requests start.
    await sleep(2000);
    await requests(port, { amount: REQUESTS });
    const exited = new Promise((resolve) => perf.once('exit', resolve));
    perf.kill('SIGINT');
    await exited;
    const counts = new Map<string, number>();
    for (const line of readFileSync(out, 'utf8').split('\n')) {
      const [count, , event] = line.split(',');
      const syscall = /^syscalls:sys_enter_(\w+)$/.exec(event ?? '')?.[1];
      if (syscall !== undefined && Number(count) > 0) counts.set(syscall, Number(count) / REQUESTS);
    }
    return counts;
  } finally {
    child.kill('SIGKILL');
  }
}

/** One line of syscallsPerRequest: the total and each call made at least once in 20 requests, beside the first variant's. */
function syscallLine(counts: Map<string, number>, base: Map<string, number>): string {
  const total = (map: Map<string, number>) => [...map.values()].reduce((sum, n) => sum + n, 0);
  const calls = [...new Set([...counts.keys(), ...base.keys()])].filter((call) => (counts.get(call) ?? 0) >= 0.05 || (base.get(call) ?? 0) >= 0.05).sort();
  const differences = calls.filter((call) => Math.abs((counts.get(call) ?? 0) - (base.get(call) ?? 0)) >= 0.05);
  const detail = counts === base ? calls.map((call) => `${call} ${counts.get(call)!.toFixed(2)}`) : differences.map((call) => `${call} ${((counts.get(call) ?? 0) - (base.get(call) ?? 0) >= 0 ? '+' : '')}${((counts.get(call) ?? 0) - (base.get(call) ?? 0)).toFixed(2)}`);
  return `${total(counts).toFixed(2).padStart(6)}  ${detail.join(', ') || 'the same calls'}`;
}

try {
  if (KIND === 'close') ensureCommand('busybox', 'busybox-static');
  if (SYSCALLS) ensureCommand('perf', 'linux-perf');
  else if (!CPU) ensureCommand('valgrind', 'valgrind');
  const addresses = await startUnits();
  const plane = planeConfig(addresses);
  const variants = (
    [
      ['the HAProxy data plane (generated)', plane],
      ...(KIND === 'tls' ? tlsVariants(plane) : closeVariants(plane, planeConfig(addresses, 'shared'), addresses)),
      ['hand-written haproxy.cfg (the reference)', handWritten(addresses)],
    ] as [string, Variant][]
  ).filter(([name], i) => i === 0 || ONLY.test(name));
  const version = execFileSync('/usr/sbin/haproxy', ['-v'], { encoding: 'utf8' }).split('\n')[0];
  const traffic = KIND === 'tls' ? 'keep-alive request over TLS' : 'request, plain HTTP, busybox units closing every connection';
  if (CPU) {
    console.log(`HAProxy CPU time per ${traffic} (all configurations running at once, ${CPU_ROUNDS} alternating rounds of ${CPU_ROUND_S} s on ${CPU_CONNECTIONS} connections, the median and range of the rounds; ${version}):`);
    const measured = await cpuPerRequest(variants);
    variants.forEach(([name], i) => {
      const { us, low, high, kernel } = measured[i]!;
      const difference = us - measured[0]!.us;
      console.log(`${name.padEnd(72)} ${us.toFixed(1).padStart(6)} µs  ${i === 0 ? '      ' : `${difference >= 0 ? '+' : ''}${difference.toFixed(1)}`.padStart(6)}  kernel ${(100 * kernel).toFixed(0)} %, rounds ${low.toFixed(1)}-${high.toFixed(1)}`);
    });
  } else if (SYSCALLS) {
    console.log(`HAProxy system calls per ${traffic} (perf stat on its syscall tracepoints, ${REQUESTS} requests on 4 connections after 400 to warm up; ${version}):`);
    let base: Map<string, number> | undefined;
    for (const [name, variant] of variants) {
      const counts = await syscallsPerRequest(name.trim(), variant);
      base ??= counts;
      console.log(`${name.padEnd(72)} ${syscallLine(counts, base)}`);
    }
  } else {
    console.log(`HAProxy instructions per ${traffic} (callgrind, ${REQUESTS} requests on 4 connections after 400 to warm up; ${version}):`);
    let base = 0;
    for (const [name, variant] of variants) {
      const count = await instructionsPerRequest(name.trim(), variant);
      base ||= count;
      console.log(`${name.padEnd(72)} ${count.toFixed(0).padStart(7)}  ${count === base ? '' : `${count > base ? '+' : ''}${(count - base).toFixed(0)}`}`);
    }
  }
} finally {
  killAll();
  rmSync(dir, { recursive: true, force: true });
}
