import t from 'tap';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { startEtcd } from '../harness/etcd.js';
import { waitFor } from '../harness/wait.js';
import { freePort } from '../harness/free-port.js';
import { serveRole } from '../harness/platform.js';
import { runsConfig } from '../../src/roles/gateway/haproxy-process.js';
import { openStore } from '../../src/store/open-store.js';
import { serviceKey, unitStatusKey } from '../../src/store/keys.js';
import { MIN_SPARE_BACKENDS } from '../../src/roles/gateway/haproxy-slots.js';
import type { GatewayTraffic } from '../../src/schemas/service-metrics.js';

// The HAProxy plane's request and 5xx counts come from HAProxy's own counters, read once per
// interval (haproxy-traffic-counters.ts). Those counters start again from zero whenever HAProxy's
// worker is replaced: here a real HAProxy is reloaded (its pool of spare backends runs dry) and its
// gateway restarted, and GET /traffic must still hold every request sent, once. Real etcd and a
// real gateway process with HAProxy; the units are Node servers on 127.0.0.1 whose statuses are
// written into the store as an agent would write them.

/** Long enough that a reload triggered right after a batch falls inside the batch's interval, before its counts are read. */
const INTERVAL_SECONDS = 3;

const etcd = await startEtcd();
const store = await openStore({ etcd: [etcd.url], dataDir: '' });
const port = await freePort();
const dataDir = mkdtempSync(join(tmpdir(), 'platform-gateway-counts-'));
const configFile = join(dataDir, `gateway-${port}`, 'haproxy.cfg');
const flags = ['--etcd', etcd.url, '--announce-ttl', '3', '--data-plane', 'haproxy', '--data-dir', dataDir, '--metrics-interval', String(INTERVAL_SECONDS)];
const startGateway = () => serveRole('gateway', port, flags);
let gateway = await startGateway();
const master = Number(readFileSync(join(dataDir, `gateway-${port}`, 'haproxy.pid'), 'utf8'));
const units: Server[] = [];
t.teardown(async () => {
  await gateway.stop();
  if (runsConfig(master, configFile)) process.kill(master, 'SIGKILL');
  for (const unit of units) unit.closeAllConnections();
  await Promise.all(units.map((unit) => new Promise((resolve) => unit.close(resolve))));
  await store.close();
  await etcd.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

/** A unit answering 200, or 500 on /fail (the unit's own 5xx, which HAProxy counts as the backend's). */
async function startUnit(): Promise<string> {
  const server = createServer((req, res) => {
    res.statusCode = req.url === '/fail' ? 500 : 200;
    res.end('ok\n');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  units.push(server);
  return `127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const declare = (service: string) => store.put(serviceKey(service), JSON.stringify({ name: service, loadBalanced: true, publicFacing: false }));
const setUnit = (service: string, address: string) =>
  store.put(unitStatusKey('local', `${service}-1.service@x`), JSON.stringify({ unit: `${service}-1.service`, service, instance: 1, machine: 'local', active: 'active', sub: 'running', address }));

const readiness = async (): Promise<{ haproxy: { reloads: number } }> => (await (await fetch(`${gateway.url}/readyz`)).json()) as { haproxy: { reloads: number } };

async function routed(service: string): Promise<void> {
  await waitFor(async () => {
    const body = (await (await fetch(`${gateway.url}/routes`)).json()) as { routes: { name: string; upstreams: unknown[] }[] };
    return body.routes.find((route) => route.name === service)?.upstreams.length === 1;
  }, 20_000, { what: `${service} routed` });
}

/**
 * `count` requests through HAProxy, four at a time, every fifth to /fail: how many, and the 5xx.
 * New connections for each batch: HAProxy 2.6 closes idle keep-alive connections at a reload.
 */
async function send(service: string, count: number): Promise<{ requests: number; errors: number }> {
  const dispatcher = new Agent({ connections: 4 });
  let next = 0;
  let errors = 0;
  const worker = async () => {
    while (next < count) {
      const path = next++ % 5 === 4 ? '/fail' : '/';
      const response = await request(`http://127.0.0.1:${port}${path}`, { headers: { host: `${service}.platform.internal` }, dispatcher });
      await response.body.dump();
      if (response.statusCode >= 500) errors += 1;
    }
  };
  await Promise.all([worker(), worker(), worker(), worker()]);
  await dispatcher.close();
  return { requests: count, errors };
}

/** Every request and 5xx of `service` in the gateway's finished intervals (GET /traffic). */
async function counted(service: string): Promise<{ requests: number; errors: number }> {
  const traffic = (await (await fetch(`${gateway.url}/traffic`)).json()) as GatewayTraffic;
  if (traffic.dataPlane !== 'haproxy') throw new Error(`the gateway runs the ${traffic.dataPlane} data plane`);
  const samples = traffic.services[service] ?? [];
  return { requests: samples.reduce((sum, sample) => sum + sample.requests, 0), errors: samples.reduce((sum, sample) => sum + sample.errors, 0) };
}

/** Waits until the finished intervals hold `expected`, then one interval more, to see nothing more is added. */
async function countsSettleAt(service: string, expected: { requests: number; errors: number }): Promise<{ requests: number; errors: number }> {
  await waitFor(async () => {
    const now = await counted(service);
    return now.requests >= expected.requests ? true : undefined;
  }, INTERVAL_SECONDS * 4_000, { what: `${expected.requests} requests of ${service} in GET /traffic`, intervalMs: 200 }).catch(() => undefined);
  await new Promise((resolve) => setTimeout(resolve, INTERVAL_SECONDS * 1_000 + 500));
  return counted(service);
}

t.test('a reload (HAProxy counts from zero again) loses no request and counts none twice', async (t) => {
  const service = 'reloaded';
  await declare(service);
  await setUnit(service, await startUnit());
  await routed(service);
  // Services for every spare backend of the pool and one more, declared now and given a unit at
  // once after the first batch: the last one finds no spare, and HAProxy reloads.
  const fillers = Array.from({ length: MIN_SPARE_BACKENDS + 1 }, (_, i) => `filler-${i + 1}`);
  for (const filler of fillers) await declare(filler);
  // A unit each: the gateway routes an address to one service only.
  const fillerUnits = await Promise.all(fillers.map(() => startUnit()));
  const reloadsBefore = (await readiness()).haproxy.reloads;

  const before = await send(service, 400);
  await Promise.all(fillers.map((filler, i) => setUnit(filler, fillerUnits[i]!)));
  await waitFor(async () => ((await readiness()).haproxy.reloads > reloadsBefore ? true : undefined), 30_000, { what: 'HAProxy reloaded', intervalMs: 50 });
  const after = await send(service, 300);

  const sent = { requests: before.requests + after.requests, errors: before.errors + after.errors };
  t.same(await countsSettleAt(service, sent), sent, 'every request and 5xx sent before and after the reload, once');
});

t.test('a gateway restarted (HAProxy handed over) counts on from its predecessor: the requests HAProxy served alone are counted, the earlier ones not again', async (t) => {
  const service = 'handed-over';
  await declare(service);
  await setUnit(service, await startUnit());
  await routed(service);
  const first = await send(service, 200);
  t.same(await countsSettleAt(service, first), first, 'counted by the first gateway');

  await gateway.stop('SIGTERM');
  t.ok(runsConfig(master, configFile), 'HAProxy runs on without its gateway');
  const alone = await send(service, 150);
  gateway = await startGateway();
  t.equal((await readiness()).haproxy.reloads, 0, 'adopted as handed over: the same worker, the same counters');
  const later = await send(service, 100);

  const sinceRestart = { requests: alone.requests + later.requests, errors: alone.errors + later.errors };
  t.same(await countsSettleAt(service, sinceRestart), sinceRestart, 'the new gateway counts what HAProxy served alone and after, and not what its predecessor counted');
});
