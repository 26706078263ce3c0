import t from 'tap';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Agent, request } from 'undici';
import type { Browser, Page } from 'playwright-core';
import { startEtcd } from '../harness/etcd.js';
import { startDockerd } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { http, serveRole } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';
import { buildDashboard, launchChromium } from '../browser/chromium.js';

// Functions given to page.evaluate run in the browser; this compilation knows only Node's globals.
declare const window: any;

// The service page's graphs and its gaps (issue 31 item 5) in Chromium, against real parts: etcd,
// every role as its own process, an agent on a real dockerd, a real registry, and two gateways,
// one on each data plane (Node and HAProxy), both carrying a request load to the service's real
// units. The graphs must show what the load sent: every request, the 5xx among them, a p95, and
// each unit's CPU and memory from the engine. Then the link, the tag picker and a reverted
// release. Screenshots go to docs/ (docs/dashboard.md shows them).

const INTERVAL_SECONDS = 1;
const docsDir = fileURLToPath(new URL('../../../docs/', import.meta.url));

buildDashboard();
const hex = () => randomBytes(3).toString('hex');
const engine = await startDockerd();
const registry = await startRegistry();
const repository = `graphs/app-${hex()}`;
for (const tag of ['v1', 'v2']) await buildTestImage(engine.docker, registry.host, repository, tag, { label: tag });
await buildTestImage(engine.docker, registry.host, repository, 'broken', { variant: 'crash' });
const browser: Browser = await launchChromium();

const etcd = await startEtcd();
const flags = ['--etcd', etcd.url, '--announce-ttl', '3', '--metrics-interval', String(INTERVAL_SECONDS)];
const directory = await serveRole('directory', await freePort(), flags);
const scheduler = await serveRole('scheduler', await freePort(), flags);
const orchestrator = await serveRole('orchestrator', await freePort(), flags);
const agent = await serveRole('agent', await freePort(), [...flags, '--network', 'host', '--machine-id', `graphs-${hex()}`, '--stop-grace', '2'], { DOCKER_HOST: engine.dockerHost });
const nodeGateway = await serveRole('gateway', await freePort(), [...flags, '--data-plane', 'node']);
const haproxyGateway = await serveRole('gateway', await freePort(), [...flags, '--data-plane', 'haproxy', '--data-dir', mkdtempSync(join(tmpdir(), 'graphs-haproxy-'))]);

t.teardown(async () => {
  await browser.close().catch(() => undefined);
  await Promise.all([directory, scheduler, agent, nodeGateway, haproxyGateway, orchestrator].map((role) => role.stop()));
  await etcd.stop();
  await registry.stop();
  await engine.stop();
});

const service = `graphs-${hex()}`;
const host = `${service}.platform.local`;
const pageErrors: string[] = [];

const created = await http('POST', `${orchestrator.url}/services`, {
  name: service,
  description: 'graphs under load',
  containerRepository: `${registry.host}/${repository}:v1`,
  loadBalanced: true,
  publicFacing: true,
  numInstances: 2,
});
if (created.status !== 201) throw new Error(`service not created: ${JSON.stringify(created.body)}`);
const deployed = await http('POST', `${orchestrator.url}/services/${service}/deploy`, {});
if (deployed.status !== 200) throw new Error(`not deployed: ${JSON.stringify(deployed.body)}`);

/** Whether both units of the service run, of a release `wanted` accepts (a number: that one). */
async function unitsRun(wanted: number | ((release: number) => boolean)): Promise<boolean> {
  const accepts = typeof wanted === 'number' ? (release: number) => release === wanted : wanted;
  const units = (await http('GET', `${orchestrator.url}/services/${service}/units`)).body as { release: number; active: string; sub: string; desired: boolean }[];
  const desired = units.filter((unit) => unit.desired);
  return desired.length === 2 && desired.every((unit) => accepts(unit.release) && unit.active === 'active' && unit.sub === 'running');
}
await waitFor(() => unitsRun(1), 90_000, { what: 'two units of v1 running', intervalMs: 250 });
await waitFor(async () => ((await http('GET', `${nodeGateway.url}/routes`)).body.routes as { name: string; upstreams: unknown[] }[]).some((route) => route.name === service && route.upstreams.length === 2), 30_000, {
  what: 'the Node gateway routing to both units',
});
await waitFor(async () => ((await http('GET', `${haproxyGateway.url}/routes`)).body.routes as { name: string; upstreams: unknown[] }[]).some((route) => route.name === service && route.upstreams.length === 2), 30_000, {
  what: 'the HAProxy gateway routing to both units',
});

async function openServicePage(): Promise<Page> {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.setDefaultTimeout(30_000);
  page.on('pageerror', (error) => pageErrors.push(error.message));
  await page.goto(`${orchestrator.url}/#/services/${service}`);
  await page.getByRole('status').filter({ hasText: /^Live$/ }).waitFor();
  return page;
}

/** GET / (200) and DELETE / (busybox httpd answers 501) through both gateways, counted by status. */
async function sendLoad(durationMs: number): Promise<{ total: number; errors: number; byGateway: Record<string, number> }> {
  const dispatcher = new Agent({ connections: 8 });
  const counts = { total: 0, errors: 0, byGateway: {} as Record<string, number> };
  const deadline = Date.now() + durationMs;
  const worker = async (gatewayUrl: string, method: 'GET' | 'DELETE') => {
    while (Date.now() < deadline) {
      const response = await request(`${gatewayUrl}/`, { method, headers: { host }, dispatcher });
      await response.body.dump();
      counts.total += 1;
      counts.byGateway[gatewayUrl] = (counts.byGateway[gatewayUrl] ?? 0) + 1;
      if (response.statusCode >= 500) counts.errors += 1;
    }
  };
  await Promise.all([nodeGateway.url, haproxyGateway.url].flatMap((url) => [worker(url, 'GET'), worker(url, 'GET'), worker(url, 'DELETE')]));
  await dispatcher.close();
  return counts;
}

/** What a chart of the page holds: its series' labels and their values (x first). */
const chart = (page: Page, title: string): Promise<{ labels: string[]; data: (number | null)[][] } | undefined> =>
  page.evaluate((title) => {
    const plot = window.dashboardCharts?.[title];
    return plot ? { labels: plot.series.slice(1).map((series: { label: string }) => series.label), data: plot.data.map((column: (number | null)[]) => Array.from(column)) } : undefined;
  }, title);

const sum = (values: (number | null)[] | undefined): number => (values ?? []).reduce<number>((total, value) => total + (value ?? 0), 0);

t.test('the graphs draw what the load sent through both data planes, and each unit’s CPU and memory', async (t) => {
  const page = await openServicePage();
  const load = await sendLoad(6_000);
  t.ok(load.total > 100 && load.errors > 10, `the load reached the units (${load.total} requests, ${load.errors} 5xx)`);
  t.ok(Object.values(load.byGateway).every((count) => count > 20), 'through both gateways');

  // Once the load's last interval has closed, the drawn requests are every request sent.
  const drawn = await waitFor(
    async () => {
      const requests = await chart(page, 'Requests per second');
      return requests && Math.round(sum(requests.data[1]) * INTERVAL_SECONDS) === load.total ? requests : undefined;
    },
    30_000,
    { what: `the requests chart to add up to the ${load.total} requests sent`, intervalMs: 500 },
  ).catch(async (error: Error) => {
    const api = (await http('GET', `${orchestrator.url}/services/${service}/metrics`)).body;
    t.comment(JSON.stringify({ sent: load, drawn: sum((await chart(page, 'Requests per second'))?.data[1]), api: { ...api, traffic: api.traffic.filter((p: { requestsPerSecond: number }) => p.requestsPerSecond > 0) } }));
    throw error;
  });
  t.same(drawn.labels, ['requests/s']);
  const errors = await chart(page, '5xx errors per second');
  t.equal(Math.round(sum(errors?.data[1]) * INTERVAL_SECONDS), load.errors, 'the 5xx chart holds every 5xx answer');
  const latency = await chart(page, 'Latency p95 (ms)');
  const p95s = (latency?.data[1] ?? []).filter((value): value is number => value !== null);
  t.ok(p95s.length >= 3 && p95s.every((ms) => ms > 0 && ms < 10_000), `a p95 for every interval with requests (${p95s.map((ms) => ms.toFixed(1)).join(', ')} ms)`);

  const cpu = await waitFor(
    async () => {
      const found = await chart(page, 'CPU per unit (cores)');
      return found && found.labels.length === 2 && found.data.slice(1).every((column) => column.some((value) => value !== null && value > 0)) ? found : undefined;
    },
    20_000,
    { what: 'CPU drawn for both units', intervalMs: 500 },
  );
  t.same(cpu.labels, [`${service}-1.service`, `${service}-2.service`], 'one line per unit');
  const memory = await chart(page, 'Memory per unit (MiB)');
  t.ok(memory?.data.slice(1).every((column) => column.some((mib) => mib !== null && mib > 0 && mib < 64)), 'each unit uses some memory (busybox httpd: well under 64 MiB)');

  await page.locator('section.graphs').screenshot({ path: join(docsDir, 'dashboard-graphs.png') });
  t.same(pageErrors, [], 'no script error on the page');
  await page.close();
});

t.test('the service page links its URL, and says why no certificate will come', async (t) => {
  const page = await openServicePage();
  const link = page.getByRole('link', { name: `http://${host}` });
  await link.waitFor();
  t.equal(await link.getAttribute('href'), `http://${host}/`);
  await page.locator('.https-status').filter({ hasText: 'no certificate expected: platform.local is not a public DNS domain' }).waitFor();
  t.pass('the HTTPS line names the private domain');
  await page.close();
});

t.test("the tag picker lists the registry's tags and deploys the one chosen", async (t) => {
  const page = await openServicePage();
  const picker = page.getByLabel(`Tag to deploy of ${service}`);
  await picker.locator('option[value="v2"]').waitFor({ state: 'attached' });
  t.same(await picker.locator('option').allTextContents(), ['running tag', 'v2', 'v1', 'broken'], 'newest version first, as the registry has them');
  await picker.selectOption('v2');
  await page.getByRole('button', { name: `Deploy ${service}` }).click();
  await waitFor(() => unitsRun(2), 90_000, { what: 'two units of v2 running', intervalMs: 250 });
  const release = (await http('GET', `${orchestrator.url}/services/${service}/config/history/2`)).body;
  t.equal(release.tag, 'v2', 'release v2 is the chosen tag');
  await page.close();
});

t.test('a release whose deployment was reverted is marked in the releases list, with why', async (t) => {
  const page = await openServicePage();
  const picker = page.getByLabel(`Tag to deploy of ${service}`);
  await picker.locator('option[value="broken"]').waitFor({ state: 'attached' });
  await picker.selectOption('broken');
  await page.getByRole('button', { name: `Deploy ${service}` }).click();
  const marked = page.locator('li.release[data-version="3"]');
  await marked.locator('.badge.red', { hasText: 'reverted' }).waitFor({ timeout: 120_000 });
  t.match(await marked.locator('.release-outcome').textContent(), /^Deployment reverted: /, 'the reason is shown');
  t.equal(await page.locator('li.release[data-version="2"] .badge.red').count(), 0, 'the good release is not marked');
  await waitFor(() => unitsRun((release) => release !== 3), 90_000, { what: 'the units running again after the revert', intervalMs: 250 });
  await page.locator('li.release[data-version="3"]').scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(docsDir, 'dashboard-service.png'), fullPage: true });
  t.same(pageErrors, [], 'no script error on the page');
  await page.close();
});
