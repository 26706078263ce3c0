import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { request as httpsRequest } from 'node:https';
import autocannon from 'autocannon';
import { buildTestImage } from '../test/harness/test-image.js';
import { http } from '../test/harness/platform.js';
import { waitFor } from '../test/harness/wait.js';
import { makeServerCertificate } from '../test/harness/tls-certificates.js';
import { median, printTable, type BenchRow } from './table.js';
import { startBenchPlatform } from './bench-platform.js';
import { dataPlaneConfig, printConfigurations, startReferenceHaproxy } from './reference-haproxy.js';
import { cpuTicks, cpuUsPerRequest, haproxyWorkers } from './proxy-cpu.js';
import { startGateway, type DataPlaneName, type Gateway } from '../test/harness/gateway-cluster.js';

// HTTPS through the gateway's two data planes (HAProxy terminating TLS itself, and Node's TLS
// listener) against a hand-written haproxy.cfg terminating TLS with the same certificate in front
// of the same units, same run, alternating rounds: TLS handshakes per second (a new connection per
// request) and keep-alive requests per second over TLS. The target (>= 0.95x) is the
// HAProxy plane's; the Node plane's rows are for comparison.

const UNITS = 3;
const CONNECTIONS = 32;
const HANDSHAKE_WORKERS = 16;
const DURATION_S = 5;
const ROUNDS = 3;
const DOMAIN = 'platform.local';

const platform = await startBenchPlatform(['directory', 'scheduler', 'orchestrator', 'agent'], 'bench-tls');
const planes: Partial<Record<DataPlaneName, Gateway>> = {};
for (const plane of ['haproxy', 'node'] as const) planes[plane] = await startGateway(plane, ['--etcd', platform.etcd.url]);
const gatewayOf = (plane: DataPlaneName): Gateway => planes[plane]!;
const dir = mkdtempSync(join(tmpdir(), 'platform-bench-tls-'));

interface Target {
  port: number;
  host: string;
  ca: string;
  /** The proxy's processes, for its CPU time per request (HAProxy's only). */
  pids?: number[];
}

/** Keep-alive requests per second over TLS (autocannon, `CONNECTIONS` connections), and the proxy's CPU time per request. */
async function keepAlive(target: Target): Promise<{ rps: number; cpuUs: number }> {
  const before = cpuTicks(target.pids ?? []);
  const result = await autocannon({
    url: `https://127.0.0.1:${target.port}/`,
    duration: DURATION_S,
    connections: CONNECTIONS,
    headers: { host: target.host },
    // autocannon's own option: it sets SNI itself (and does not verify the certificate).
    servername: target.host,
  } as autocannon.Options);
  if (result.errors + result.non2xx > 0) throw new Error(`port ${target.port}: ${result.errors} errors, ${result.non2xx} non-2xx of ${result.requests.total} over keep-alive TLS (${JSON.stringify(result.statusCodeStats)})`);
  return { rps: result.requests.average, cpuUs: cpuUsPerRequest(cpuTicks(target.pids ?? []) - before, result.requests.total) };
}

/** One request on a new TLS connection. */
const freshRequest = (target: Target): Promise<void> =>
  new Promise((resolve, reject) => {
    const req = httpsRequest({ host: '127.0.0.1', port: target.port, servername: target.host, headers: { host: target.host, connection: 'close' }, ca: target.ca, agent: false }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`status ${res.statusCode}`))));
    });
    req.on('error', reject);
    req.end();
  });

/** Full handshakes per second: `HANDSHAKE_WORKERS` clients, each a new connection per request. */
async function handshakes(target: Target): Promise<number> {
  const end = performance.now() + DURATION_S * 1000;
  let done = 0;
  await Promise.all(
    Array.from({ length: HANDSHAKE_WORKERS }, async () => {
      while (performance.now() < end) {
        await freshRequest(target);
        done += 1;
      }
    }),
  );
  return done / DURATION_S;
}

async function deployUnits(): Promise<{ service: string; addresses: string[] }> {
  const repository = 'bench/tls-keep-alive';
  const image = await buildTestImage(platform.engine.docker, platform.registry.host, repository, 'v1', { variant: 'keep-alive' });
  const service = `tls-${randomBytes(2).toString('hex')}`;
  await http('POST', `${platform.url('directory')}/services`, { name: service, containerImage: `${platform.registry.host}/${repository}`, numInstances: UNITS, publicFacing: true });
  const deploy = await http('POST', `${platform.url('scheduler')}/hooks/deploy`, { serviceName: service, containerRepository: image.reference, pushedAt: 0 });
  if (deploy.status !== 200) throw new Error(`deploy failed: ${JSON.stringify(deploy.body)}`);
  const addresses = await waitFor(async () => {
    const { routes } = (await http('GET', `${gatewayOf('haproxy').url}/routes`)).body as { routes: { name: string; upstreams: { address: string }[] }[] };
    const upstreams = routes.find((route) => route.name === service)?.upstreams ?? [];
    return upstreams.length === UNITS ? upstreams.map((upstream) => upstream.address) : undefined;
  }, 120_000, { what: `${UNITS} routable units` });
  return { service, addresses };
}

try {
  const certificate = makeServerCertificate(dir, 'bench', [`*.${DOMAIN}`]);
  const [chain, key, ca] = [certificate.cert, certificate.key, certificate.ca].map((file) => readFileSync(file, 'utf8')) as [string, string, string];
  const added = await http('POST', `${platform.url('orchestrator')}/certificates`, { host: `*.${DOMAIN}`, certificate: chain, key });
  if (added.status !== 201) throw new Error(`certificate refused: ${JSON.stringify(added.body)}`);
  const pem = join(dir, 'haproxy.pem');
  writeFileSync(pem, `${chain}${key}`);
  const { service, addresses } = await deployUnits();
  const host = `${service}.${DOMAIN}`;
  const httpsPort = async (plane: DataPlaneName) => ((await http('GET', `${gatewayOf(plane).url}/readyz`)).body as { https: { port: number } }).https.port;
  const haproxyPlane: Target = { port: await httpsPort('haproxy'), host, ca, pids: haproxyWorkers(gatewayOf('haproxy')) };
  const nodePlane: Target = { port: await httpsPort('node'), host, ca };
  for (const [plane, target] of [['haproxy', haproxyPlane], ['node', nodePlane]] as const) {
    await waitFor(async () => freshRequest(target).then(() => true, () => false), 30_000, { what: `the ${plane} data plane to serve HTTPS` });
  }
  // HAProxy terminating TLS with the same certificate, TLS 1.2-1.3 as the gateway.
  const haproxy = await startReferenceHaproxy(addresses, `ssl crt ${pem} ssl-min-ver TLSv1.2 ssl-max-ver TLSv1.3`, (port) => freshRequest({ port, host, ca }).then(() => true, () => false));
  const targets = { haproxyPlane, nodePlane, reference: { port: haproxy.port, host, ca, pids: [haproxy.pid] } };
  const names = ['haproxyPlane', 'nodePlane', 'reference'] as const;
  const runs = Object.fromEntries(names.map((name) => [name, { handshakes: [] as number[], keepAlive: [] as number[], cpuUs: [] as number[] }])) as Record<
    (typeof names)[number],
    { handshakes: number[]; keepAlive: number[]; cpuUs: number[] }
  >;
  for (const name of names) await keepAlive(targets[name]); // warm-up
  for (let round = 0; round < ROUNDS; round++) {
    for (const name of names) {
      runs[name].handshakes.push(await handshakes(targets[name]));
      const { rps, cpuUs } = await keepAlive(targets[name]);
      runs[name].keepAlive.push(rps);
      runs[name].cpuUs.push(cpuUs);
    }
  }
  const gateway = gatewayOf('haproxy');
  printConfigurations({ 'HAProxy data plane': dataPlaneConfig(gateway.dataDir, gateway.port), 'hand-written haproxy.cfg (the reference)': haproxy.config });
  haproxy.stop();
  const row = (what: string, gw: number[], ha: number[], target: string): BenchRow => ({
    benchmark: `${what} (median of ${ROUNDS} x ${DURATION_S} s)`,
    platform: median(gw).toFixed(0),
    reference: `${median(ha).toFixed(0)} (HAProxy 2.6, hand-written)`,
    ratio: `${(median(gw) / median(ha)).toFixed(2)}x`,
    target,
  });
  printTable([
    row(`TLS handshakes/s, new connection per request, ${HANDSHAKE_WORKERS} clients, HAProxy data plane`, runs.haproxyPlane.handshakes, runs.reference.handshakes, '>= 0.95x'),
    row(`keep-alive req/s over TLS, ${CONNECTIONS} connections, ${UNITS} units, HAProxy data plane`, runs.haproxyPlane.keepAlive, runs.reference.keepAlive, '>= 0.95x'),
    {
      benchmark: `HAProxy CPU time per keep-alive request over TLS, HAProxy data plane (median of ${ROUNDS} x ${DURATION_S} s)`,
      platform: `${median(runs.haproxyPlane.cpuUs).toFixed(1)} us`,
      reference: `${median(runs.reference.cpuUs).toFixed(1)} us (HAProxy 2.6, hand-written)`,
      ratio: `${(median(runs.haproxyPlane.cpuUs) / median(runs.reference.cpuUs)).toFixed(2)}x`,
      target: '-',
    },
    row(`TLS handshakes/s, new connection per request, ${HANDSHAKE_WORKERS} clients, Node data plane`, runs.nodePlane.handshakes, runs.reference.handshakes, 'for comparison'),
    row(`keep-alive req/s over TLS, ${CONNECTIONS} connections, ${UNITS} units, Node data plane`, runs.nodePlane.keepAlive, runs.reference.keepAlive, 'for comparison'),
  ]);
} finally {
  await Promise.all(Object.values(planes).map((gateway) => gateway.stop()));
  await platform.stop();
  rmSync(dir, { recursive: true, force: true });
}
