import t from 'tap';
import { readFileSync } from 'node:fs';
import { request as httpsRequest, Agent } from 'node:https';
import { request as httpRequest } from 'node:http';
import type { TLSSocket } from 'node:tls';
import { connect as http2Connect } from 'node:http2';
import { lstatSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { startGateway, startGatewayCluster, testedDataPlanes } from '../harness/gateway-cluster.js';
import { freePort } from '../harness/free-port.js';
import { http, runCli, serveRole, type PlatformProcess } from '../harness/platform.js';
import { makeServerCertificate } from '../harness/tls-certificates.js';
import { startPebble } from '../harness/pebble.js';
import { waitFor } from '../harness/wait.js';

// HTTPS on the gateway with real parts: etcd, dockerd, the registry, units of the test image, the
// orchestrator, and Debian's pebble as the ACME server validating HTTP-01 against a gateway's plain
// port (pebble-challtestsrv resolves every name to 127.0.0.1). Operator certificates first (on a
// gateway without ACME), then ACME on two gateways, then renewal of short-lived certificates under load.
// Every check runs on each data plane: the operator test once per plane, and the two ACME gateways
// run one plane each (HAProxy terminating TLS itself, Node's TLS listener), so the renewal loop
// covers both.

const DOMAIN = 'example.test';
const CERT_LIFETIME_SECONDS = 45;

const cluster = await startGatewayCluster();
const dir = t.testdir();
const started: (PlatformProcess & { url: string })[] = [];
const stops: (() => Promise<void>)[] = [];
t.teardown(async () => {
  await Promise.all(started.map((role) => role.stop()));
  for (const stop of stops) await stop();
  await cluster.stop();
});

const domainFlags = [...cluster.flags, '--domain', DOMAIN];
const orchestrator = await serveRole('orchestrator', await freePort(), domainFlags);
started.push(orchestrator);

await Promise.all([
  cluster.declare('shop', { numInstances: 2, publicFacing: true, env: { GREETING: 'shop' } }),
  cluster.declare('other', { numInstances: 1, publicFacing: true, env: { GREETING: 'other' } }),
  cluster.declare('hidden', { numInstances: 1, publicFacing: false, env: { GREETING: 'hidden' } }),
]);
for (const service of ['shop', 'other', 'hidden']) await cluster.deployed(await cluster.deploy(service));

interface Answer {
  status: number;
  body: string;
  headers: Record<string, string | string[] | undefined>;
  fingerprint: string;
}

/** GET over TLS to 127.0.0.1:port with SNI and Host `name`, trusting `ca`. */
function tlsGet(port: number, name: string, ca: string, options: { agent?: Agent; path?: string } = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(
      { host: '127.0.0.1', port, path: options.path ?? '/', servername: name, headers: { host: `${name}:${port}` }, ca, agent: options.agent ?? false, timeout: 10_000 },
      (res) => {
        const fingerprint = (res.socket as TLSSocket).getPeerCertificate().fingerprint256;
        let body = '';
        res.on('data', (chunk: Buffer) => (body += chunk.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers, fingerprint }));
      },
    );
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.end();
  });
}

/** A GET over HTTP/2 (ALPN h2) to 127.0.0.1:port with SNI and :authority `name`. */
function h2Get(port: number, name: string, ca: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const session = http2Connect(`https://${name}:${port}`, { host: '127.0.0.1', servername: name, ca });
    session.on('error', reject);
    const req = session.request({ ':path': '/', ':authority': `${name}:${port}` });
    let status = 0;
    let body = '';
    req.on('response', (headers) => (status = Number(headers[':status'])));
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      session.close();
      resolve({ status, body });
    });
    req.on('error', reject);
    req.end();
  });
}

/** A plain GET with Host `name`. */
function plainGet(port: number, name: string, path = '/'): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, headers: { host: name }, agent: false }, (res) => {
      let body = '';
      res.on('data', (chunk: Buffer) => (body += chunk.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

const platform = (...args: string[]) => runCli(orchestrator.url, args);

const journal = async (kind: string) => ((await http('GET', `${orchestrator.url}/journal?limit=500`)).body as { kind: string; message: string; service?: string }[]).filter((entry) => entry.kind === kind);

const planes = testedDataPlanes();

for (const plane of planes) {
  t.test(`operator certificates (${plane} data plane): three refusals, a wildcard served for every public service, redirects and HSTS`, async (t) => {
    const [plainPort, httpsPort] = [await freePort(), await freePort()];
    const gateway = await startGateway(plane, [...domainFlags, '--https-port', String(httpsPort), '--https-redirect', '--hsts-max-age', '600'], plainPort);
    t.teardown(() => gateway.stop());
    const addedBefore = (await journal('certificate.added')).length;
    const wildcard = makeServerCertificate(dir, 'wild', [`*.${DOMAIN}`]);
    const stranger = makeServerCertificate(dir, 'stranger', [`*.${DOMAIN}`]);
    const expired = makeServerCertificate(dir, 'expired', [`*.${DOMAIN}`], { expired: true });
    const elsewhere = makeServerCertificate(dir, 'elsewhere', ['www.example.org']);

    const mismatched = await platform('cert', 'add', `*.${DOMAIN}`, '--cert', wildcard.cert, '--key', stranger.key);
    t.not(mismatched.code, 0);
    t.match(mismatched.stderr, /key: does not match the certificate/);
    const refused = async (cert: { cert: string; key: string }, host = `*.${DOMAIN}`) =>
      http('POST', `${orchestrator.url}/certificates`, { host, certificate: readFileSync(cert.cert, 'utf8'), key: readFileSync(cert.key, 'utf8') });
    const old = await refused(expired);
    t.equal(old.status, 400);
    t.match(old.body.message, /^certificate: expired on /);
    const foreign = await refused(elsewhere);
    t.equal(foreign.status, 400);
    t.equal(foreign.body.message, `certificate: does not cover *.${DOMAIN} (its names: www.example.org)`);
    t.same((await http('GET', `${orchestrator.url}/certificates`)).body, [], 'nothing was stored');

    const added = await platform('cert', 'add', `*.${DOMAIN}`, '--cert', wildcard.cert, '--key', wildcard.key);
    t.equal(added.code, 0, added.stderr);
    const listed = await platform('cert', 'list');
    t.match(listed.stdout, new RegExp(`\\*\\.${DOMAIN}\\s+CN=wild-ca\\s+\\S+\\s+operator`));
    const listing = JSON.stringify((await http('GET', `${orchestrator.url}/certificates`)).body);
    t.notOk(listing.includes('PRIVATE KEY') || listing.includes('"key"'), 'the listing carries no key');
    const entries = await journal('certificate.added');
    t.equal(entries.length, addedBefore + 1);
    t.equal(entries[0]!.message, `POST /certificates: certificate for *.${DOMAIN}`, 'the journal names the host only');
    t.notOk(gateway.output().includes('PRIVATE KEY'), 'no key in the gateway log');
    t.notOk(orchestrator.output().includes('PRIVATE KEY'), 'no key in the orchestrator log');

    const ca = readFileSync(wildcard.ca, 'utf8');
    for (const service of ['shop', 'other']) {
      const answer = await waitFor(async () => tlsGet(httpsPort, `${service}.${DOMAIN}`, ca).catch(() => undefined), 15_000, { what: `HTTPS for ${service}` });
      t.equal(answer.status, 200);
      t.match(answer.body, new RegExp(`^${service}-\\d\\.service ${service} `), `${service} answers from its units over HTTPS`);
      t.equal(answer.headers['strict-transport-security'], 'max-age=600');
    }
    const metrics = await (await fetch(`${gateway.url}/metrics`)).text();
    const built = Number(/^platform_gateway_tls_contexts_built_total (\d+)$/m.exec(metrics)?.[1]);
    if (plane === 'haproxy') t.equal(built, 0, 'HAProxy terminates TLS: the gateway builds no Node secure context');
    else t.equal(built, 1, 'the Node plane built one secure context, for the wildcard certificate');
    await t.rejects(tlsGet(httpsPort, `hidden.${DOMAIN}`, ca), 'no handshake for an internal-only service on the public domain');
    await t.rejects(tlsGet(httpsPort, `unknown.${DOMAIN}`, ca), 'no handshake for a name no service has, though the wildcard covers it');
    if (plane === 'haproxy') {
      const ready = await http('GET', `${gateway.url}/readyz`);
      t.match(ready.body, { dataPlane: 'haproxy', https: { port: httpsPort, certificates: 1 } }, 'HAProxy terminates TLS; /readyz keeps the HTTPS facts');
      const certs = join(gateway.dataDir, `gateway-${plainPort}`, 'certs');
      for (const file of readdirSync(certs)) t.equal(lstatSync(join(certs, file)).mode & 0o777, 0o600, `${file} is readable by the gateway only`);
      t.ok(readdirSync(certs).includes(`shop.${DOMAIN}.pem`));
      const h2 = await h2Get(httpsPort, `shop.${DOMAIN}`, ca);
      t.equal(h2.status, 200);
      t.match(h2.body, /^shop-\d\.service shop /, 'HTTP/2 by ALPN reaches the units');
    }

    const redirected = await plainGet(plainPort, `shop.${DOMAIN}`, '/a/b?c=d');
    t.equal(redirected.status, 308);
    t.equal(redirected.headers.location, `https://shop.${DOMAIN}:${httpsPort}/a/b?c=d`);
    const internal = await plainGet(plainPort, 'hidden.platform.internal');
    t.equal(internal.status, 200, 'internal names are not redirected');
    t.equal(internal.headers['strict-transport-security'], undefined);

    const removed = await platform('cert', 'remove', `*.${DOMAIN}`);
    t.equal(removed.code, 0, removed.stderr);
    await waitFor(async () => tlsGet(httpsPort, `shop.${DOMAIN}`, ca).then(() => false, () => true), 10_000, { what: 'the removed certificate to stop serving' });
  });
}

const gatewayPorts = { a: { plain: await freePort(), https: await freePort() }, b: { plain: await freePort(), https: await freePort() } };
const pebble = await startPebble({ httpPort: gatewayPorts.a.plain, certificateValiditySeconds: CERT_LIFETIME_SECONDS, blockedDomains: [`blocked.${DOMAIN}`] });
// A public service pebble refuses to issue for: its order fails with pebble's reason.
await cluster.declare('blocked', { numInstances: 1, publicFacing: true });
stops.push(() => pebble.stop());
const acmeFlags = ['--acme-email', 'ops@example.test', '--acme-directory', pebble.directory, '--acme-ca-file', pebble.listenerCaFile];
const root = await pebble.issuingRoot();

t.test('ACME: a public service gets a certificate with no operator step; two gateways make one order and serve it', async (t) => {
  // Both gateways start at once: both see the hosts with no certificate and race for the lock.
  // With both planes tested, a runs HAProxy and b Node.
  const [a, b] = await Promise.all(
    (['a', 'b'] as const).map((name, i) =>
      startGateway(planes[i] ?? planes[0]!, [...domainFlags, ...acmeFlags, '--https-port', String(gatewayPorts[name].https), '--log-level', 'info'], gatewayPorts[name].plain),
    ),
  );
  started.push(a!, b!);
  const served = await waitFor(async () => tlsGet(gatewayPorts.b.https, `shop.${DOMAIN}`, root).catch(() => undefined), 60_000, { what: 'an ACME certificate for shop' });
  t.equal(served.status, 200);
  t.match(served.body, /^shop-\d\.service shop /, 'shop answers from its units over HTTPS');
  // Each gateway takes the stored certificate from its own watch: a may apply it after b.
  const viaA = await waitFor(async () => tlsGet(gatewayPorts.a.https, `shop.${DOMAIN}`, root).catch(() => undefined), 15_000, { what: 'gateway a to serve shop' });
  t.equal(viaA.fingerprint, served.fingerprint, 'both gateways serve the same certificate');
  await waitFor(async () => tlsGet(gatewayPorts.a.https, `other.${DOMAIN}`, root).catch(() => undefined), 60_000, { what: 'an ACME certificate for other' });
  // First orders only: with 45 s certificates, a slow run may already see a renewal.
  const ordersOf = (host: string) =>
    `${a!.output()}${b!.output()}`.split('\n').filter((line) => line.includes('ACME order started') && line.includes(`"host":"${host}"`) && line.includes('"renewal":false')).length;
  // Why, when it was not one: a failed first order retried, or two gateways ordering.
  if (ordersOf(`shop.${DOMAIN}`) !== 1 || ordersOf(`other.${DOMAIN}`) !== 1) t.comment(`${a!.output()}${b!.output()}`.split('\n').filter((line) => line.includes('ACME')).join('\n'));
  t.equal(ordersOf(`shop.${DOMAIN}`), 1, 'of the two gateways, one ordered shop');
  t.equal(ordersOf(`other.${DOMAIN}`), 1, 'of the two gateways, one ordered other');
  const issued = await journal('certificate.issued');
  t.equal(issued.filter((entry) => entry.service === 'shop').length, 1, 'exactly one order for shop');
  t.equal(issued.filter((entry) => entry.service === 'other').length, 1, 'exactly one order for other');
  const listing = (await http('GET', `${orchestrator.url}/services/shop/certificate`)).body;
  t.equal(listing.certificate.source, 'acme');
  t.equal(listing.acme.state, 'issued');
  t.equal(listing.certificate.fingerprint, served.fingerprint);

  t.equal((await http('GET', `${orchestrator.url}/services/hidden/certificate`)).body.publicFacing, false);
  const hosts = ((await http('GET', `${orchestrator.url}/certificates`)).body as { host: string }[]).map((entry) => entry.host);
  t.same(hosts.sort(), [`blocked.${DOMAIN}`, `other.${DOMAIN}`, `shop.${DOMAIN}`], 'the internal-only service was never given a certificate nor ordered');
  await t.rejects(tlsGet(gatewayPorts.a.https, `hidden.${DOMAIN}`, root));
});

t.test("a failed order is journaled with the ACME server's reason, shown on /readyz and the service, and retried later", async (t) => {
  const [failed] = await waitFor(async () => {
    const entries = (await journal('certificate.failed')).filter((entry) => entry.service === 'blocked');
    return entries.length > 0 ? entries : undefined;
  }, 30_000, { what: 'the failed order of blocked to be journaled' });
  t.match(failed!.message, new RegExp(`^ordering a certificate for blocked\\.${DOMAIN} failed: .*blocked.*; next attempt at `, 'i'));
  const gateway = started.find((role) => role.url.endsWith(`:${gatewayPorts.a.plain}`))!;
  const ready = await http('GET', `${gateway.url}/readyz`);
  t.equal(ready.status, 200, 'a failing order does not make the gateway unready');
  const failing = ready.body.https.acmeFailing as { host: string; error: string; failures: number; nextAttemptAt: string }[];
  t.same(failing.map((entry) => entry.host), [`blocked.${DOMAIN}`]);
  t.ok(Date.parse(failing[0]!.nextAttemptAt) > Date.now(), 'the next attempt lies ahead');
  const page = (await http('GET', `${orchestrator.url}/services/blocked/certificate`)).body;
  t.equal(page.acme.state, 'failed');
  t.equal(page.acme.error, failing[0]!.error);
  t.notOk(page.certificate);
});

t.test(`renewal under load (${planes.join(' and ')}): the served certificate changes and no request fails`, async (t) => {
  const first = await tlsGet(gatewayPorts.a.https, `shop.${DOMAIN}`, root);
  const gateways = started.filter((role) => role !== orchestrator);
  const reloads = async () => Promise.all(gateways.map(async (role) => ((await http('GET', `${role.url}/readyz`)).body as { haproxy?: { reloads: number } }).haproxy?.reloads));
  const reloadsBefore = await reloads();
  const keepAlive = new Agent({ keepAlive: true, maxSockets: 2, ca: root });
  t.teardown(() => keepAlive.destroy());
  const failures: string[] = [];
  const fingerprints = new Set<string>();
  let requests = 0;
  let stop = false;
  const loop = async (port: number, agent: Agent | undefined) => {
    while (!stop) {
      try {
        const answer = await tlsGet(port, `shop.${DOMAIN}`, root, agent ? { agent } : {});
        requests += 1;
        if (answer.status !== 200) failures.push(`status ${answer.status}`);
        if (!agent) fingerprints.add(answer.fingerprint);
      } catch (error) {
        failures.push((error as Error).message);
      }
    }
  };
  const loops = [loop(gatewayPorts.a.https, keepAlive), loop(gatewayPorts.b.https, keepAlive), loop(gatewayPorts.a.https, undefined), loop(gatewayPorts.b.https, undefined)];
  try {
    const renewedOnBoth = async () =>
      fingerprints.size >= 2 &&
      (await tlsGet(gatewayPorts.a.https, `shop.${DOMAIN}`, root)).fingerprint !== first.fingerprint &&
      (await tlsGet(gatewayPorts.b.https, `shop.${DOMAIN}`, root)).fingerprint !== first.fingerprint;
    await waitFor(renewedOnBoth, CERT_LIFETIME_SECONDS * 1000 * 2, { what: 'a renewed certificate served by both gateways' });
  } finally {
    stop = true;
    await Promise.all(loops);
  }
  t.same(failures, [], `no failed request among ${requests}`);
  t.same(await reloads(), reloadsBefore, 'HAProxy took the renewed certificate through its Runtime API, with no reload');
  t.ok(requests > 50, `${requests} requests ran through the renewal`);
  const renewed = await journal('certificate.renewed');
  t.ok(renewed.some((entry) => entry.service === 'shop'), 'the renewal is journaled');
});

t.test("deleting a service removes its ACME certificate from the store and both planes; declared again, it is ordered a new one; an operator's certificate stays", async (t) => {
  const certificates = async () => (await http('GET', `${orchestrator.url}/certificates`)).body as { host: string; serving: string[]; certificate?: { source: string; fingerprint: string }; acme?: unknown }[];
  const issuedForOther = async () => (await journal('certificate.issued')).filter((entry) => entry.service === 'other').length;
  const host = `other.${DOMAIN}`;
  for (const port of [gatewayPorts.a.https, gatewayPorts.b.https]) t.equal((await tlsGet(port, host, root)).status, 200, `other is served over HTTPS on port ${port} before`);
  // An operator's certificate for a service's host, stored before the service is declared: never ordered over, and kept.
  const legacyCert = makeServerCertificate(dir, 'legacy', [`legacy.${DOMAIN}`]);
  t.equal((await platform('cert', 'add', `legacy.${DOMAIN}`, '--cert', legacyCert.cert, '--key', legacyCert.key)).code, 0);
  await cluster.declare('legacy', { numInstances: 1, publicFacing: true });
  t.same((await certificates()).find((entry) => entry.host === `legacy.${DOMAIN}`)?.serving, [`legacy.${DOMAIN}`]);
  const issuedBefore = await issuedForOther();

  for (const service of ['other', 'legacy']) {
    const deleted = await platform('delete', service);
    t.equal(deleted.code, 0, deleted.stderr);
  }
  await waitFor(
    async () => {
      const left = (await certificates()).find((entry) => entry.host === host);
      // Thrown, so that a timeout names what stayed.
      if (left) throw new Error(`still listed: ${JSON.stringify({ source: left.certificate?.source, acme: left.acme })}`);
      return true;
    },
    90_000,
    { what: "other's certificate and ACME status to leave the store" },
  );
  const removed = (await journal('certificate.removed')).filter((entry) => entry.service === 'other');
  t.equal(removed.length, 1, 'the removal is journaled on the service');
  t.equal(removed[0]!.message, `certificate for ${host} (ACME) removed: service other was deleted`);
  for (const port of [gatewayPorts.a.https, gatewayPorts.b.https]) {
    await waitFor(async () => tlsGet(port, host, root).then(() => false, () => true), 15_000, { what: `the handshake for ${host} to fail on port ${port}` });
  }
  const listed = await platform('cert', 'list');
  t.notMatch(listed.stdout, host, '`platform cert list` no longer shows it');
  t.match(listed.stdout, new RegExp(`legacy\\.${DOMAIN}\\s+CN=legacy-ca\\s+\\S+\\s+operator\\s+-\\s+none\\n`), "the operator's certificate stays, serving no routed host");
  const legacy = (await certificates()).find((entry) => entry.host === `legacy.${DOMAIN}`);
  t.equal(legacy?.certificate?.source, 'operator');
  t.same(legacy?.serving, []);

  await cluster.declare('other', { numInstances: 1, publicFacing: true });
  const again = await waitFor(async () => (await certificates()).find((entry) => entry.host === host && entry.certificate), 60_000, { what: 'a certificate for other declared again' });
  t.equal(again.certificate!.source, 'acme');
  await waitFor(async () => (await issuedForOther()) === issuedBefore + 1, 15_000, { what: "a new order journaled as issued, not a renewal of the deleted service's certificate" });
  for (const port of [gatewayPorts.a.https, gatewayPorts.b.https]) {
    const served = await waitFor(async () => tlsGet(port, host, root).catch(() => undefined), 15_000, { what: `the new certificate served on port ${port}` });
    t.equal(served.fingerprint, again.certificate!.fingerprint);
  }
  await platform('cert', 'remove', `legacy.${DOMAIN}`);
});
