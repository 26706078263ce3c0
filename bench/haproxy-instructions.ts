import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { freePort } from '../test/harness/free-port.js';
import { ensureCommand } from '../test/harness/system-packages.js';
import { makeServerCertificate } from '../test/harness/tls-certificates.js';
import { referenceConfig } from './reference-haproxy.js';
import { writeGeneratedConfig } from './generated-haproxy.js';

// Where the HAProxy data plane's CPU per keep-alive request over TLS goes, counted in instructions
// rather than timed: HAProxy runs under valgrind's callgrind, which counts every instruction it
// executes, so a configuration's cost per request is the same whatever else the machine runs (two
// runs of one configuration differ by about 0.1 %, where CPU time per request on the shared
// machine moved ±5 % between rounds). The generated configuration (haproxyConfig, as the gateway
// writes it, in front of three local Node keep-alive servers) is measured as it is and with one
// thing taken out or changed at a time, beside the hand-written reference of bench/tls.ts.
// Instructions are not time: callgrind's own memcpy counts about 2 instructions per byte, where
// the CPU's copies 64 bytes at a time, so a copy weighs more here than on the CPU (perf on the
// running proxies, docs/gateway.md, gives its share of the time). Kernel work is not counted.
// `node dist/bench/haproxy-instructions.js [REQUESTS]`: about 2 minutes.

const REQUESTS = Number(process.argv[2] ?? 1000);
const HOST = 'svc.platform.local';
const dir = mkdtempSync(join(tmpdir(), 'platform-bench-instructions-'));
const children: ChildProcess[] = [];
const killAll = () => children.forEach((child) => child.kill('SIGKILL'));
process.once('exit', killAll);

/** Free ports for a configuration's binds: the TLS one (the one measured) and the gateway's plain one. */
interface Ports {
  tls: number;
  plain: number;
}

/** A configuration, written into its own directory. */
type Variant = (root: string, ports: Ports) => string;

const unitScript = "require('node:http').createServer((req, res) => { res.setHeader('content-type', 'text/html'); res.end('unit ' + process.env.PORT + '\\n'); }).listen(Number(process.env.PORT), '127.0.0.1');";

async function startUnits(): Promise<string[]> {
  const addresses: string[] = [];
  for (let i = 0; i < 3; i++) {
    const port = await freePort();
    children.push(spawn(process.execPath, ['-e', unitScript], { env: { PORT: String(port) }, stdio: 'ignore' }));
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

/** The gateway's configuration for one public service on three units, with its default settings and its TLS bind. */
function planeConfig(addresses: string[], hostPem: string, placeholderPem: string): Variant {
  return (root, ports) => {
    const crtList = join(root, 'certs.list');
    writeFileSync(crtList, `${placeholderPem} placeholder.invalid\n${hostPem} ${HOST}\n`);
    // Nothing here asks for the gateway's own endpoints (ownPort).
    const route = { service: 'svc', host: HOST, addresses, port: ports.plain, ownPort: 1, tls: { host: '127.0.0.1', port: ports.tls, crtList, domain: 'platform.local' } };
    return writeGeneratedConfig(root, route).config;
  };
}

/** The variant without the lines `pattern` matches. */
const without =
  (variant: Variant, pattern: RegExp): Variant =>
  (root, ports) =>
    variant(root, ports)
      .split('\n')
      .filter((line) => !pattern.test(line))
      .join('\n');

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

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Keep-alive requests over TLS on 4 connections; throws unless all `amount` answered 2xx. */
async function requests(port: number, amount: number): Promise<void> {
  const result = await autocannon({ url: `https://127.0.0.1:${port}/`, amount, connections: 4, timeout: 60, headers: { host: HOST }, servername: HOST } as autocannon.Options);
  if (result['2xx'] !== amount) throw new Error(`port ${port}: ${result['2xx']} of ${amount} answered 2xx (${result.errors} errors, ${result.non2xx} non-2xx)`);
}

/** Instructions HAProxy executes per keep-alive request over TLS with `config`, counted by callgrind after a warm-up. */
async function instructionsPerRequest(name: string, variant: Variant): Promise<number> {
  const root = mkdtempSync(join(dir, 'haproxy-'));
  const ports = { tls: await freePort(), plain: await freePort() };
  const port = ports.tls;
  writeFileSync(join(root, 'haproxy.cfg'), variant(root, ports));
  const out = join(root, 'callgrind.out');
  const child = spawn('valgrind', ['--tool=callgrind', `--callgrind-out-file=${out}`, '/usr/sbin/haproxy', '-f', join(root, 'haproxy.cfg'), '-db'], { stdio: ['ignore', 'ignore', 'pipe'] });
  children.push(child);
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  try {
    for (let attempt = 0; ; attempt++) {
      if (await requests(port, 8).then(() => true, () => false)) break;
      if (attempt === 60) throw new Error(`${name}: HAProxy under callgrind did not answer within a minute: ${stderr.slice(-2000)}`);
      await sleep(1000);
    }
    await requests(port, 400);
    execFileSync('callgrind_control', ['--zero', String(child.pid)], { stdio: 'ignore' });
    await requests(port, REQUESTS);
    execFileSync('callgrind_control', ['--dump', String(child.pid)], { stdio: 'ignore' });
    const dumps = readdirSync(root).filter((file) => file.startsWith('callgrind.out.'));
    const instructions = dumps.reduce((sum, file) => sum + Number(/^summary: (\d+)/m.exec(readFileSync(join(root, file), 'utf8'))?.[1] ?? NaN), 0);
    if (dumps.length === 0 || !Number.isFinite(instructions)) throw new Error(`${name}: no callgrind dump in ${root}`);
    return instructions / REQUESTS;
  } finally {
    child.kill('SIGKILL');
  }
}

try {
  ensureCommand('valgrind', 'valgrind');
  const addresses = await startUnits();
  const plane = planeConfig(addresses, pemFor('host', [`*.platform.local`]), pemFor('placeholder', ['placeholder.invalid']));
  const hostPem = join(dir, 'host.pem');
  const variants: [string, Variant][] = [
    ['the HAProxy data plane (generated)', plane],
    ['  without the L7 retry (retry-on conn-failure only)', changed(plane, /retry-on conn-failure empty-response/g, 'retry-on conn-failure')],
    ['  with 16 KiB buffers (no room for the 431 answer)', without(plane, /tune\.bufsize/)],
    ['  without the frontend rules (routing kept)', frontendRulesOnly(plane, /set-var\(txn\.(host|backend)\)/)],
    ['  without X-Forwarded-For', without(plane, /x-forwarded-for|xff_count/)],
    ['  without X-Forwarded-Proto', without(plane, /x-forwarded-proto/)],
    ['  without X-Forwarded-Host', without(plane, /x-forwarded-host/)],
    ['  without the hop-by-hop header removals', without(plane, /-m reg( if routed)?$/)],
    ['  without the Connection-named header check', without(plane, /names_headers/)],
    ['  without the per-address cap and the 431 check', without(plane, /stick-table|track-sc0|sc0_conn_cur|req\.hdrs,length/)],
    ['  with balance roundrobin', changed(plane, /balance leastconn/g, 'balance roundrobin')],
    ['hand-written haproxy.cfg (the reference)', (_root, ports) => referenceConfig(ports.tls, addresses, `ssl crt ${hostPem} ssl-min-ver TLSv1.2 ssl-max-ver TLSv1.3`)],
  ];
  console.log(`HAProxy instructions per keep-alive request over TLS (callgrind, ${REQUESTS} requests on 4 connections after 400 to warm up; ${execFileSync('/usr/sbin/haproxy', ['-v'], { encoding: 'utf8' }).split('\n')[0]}):`);
  let base = 0;
  for (const [name, variant] of variants) {
    const count = await instructionsPerRequest(name.trim(), variant);
    base ||= count;
    console.log(`${name.padEnd(56)} ${count.toFixed(0).padStart(7)}  ${count === base ? '' : `${count > base ? '+' : ''}${(count - base).toFixed(0)}`}`);
  }
} finally {
  killAll();
  rmSync(dir, { recursive: true, force: true });
}
