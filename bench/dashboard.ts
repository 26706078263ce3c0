import { parseArgs } from 'node:util';
import type { Page } from 'playwright-core';
import { EtcdStore } from '../src/store/etcd-store.js';
import { startEtcd } from '../test/harness/etcd.js';
import { freePort } from '../test/harness/free-port.js';
import { serveRole, type PlatformProcess } from '../test/harness/platform.js';
import { declareLoadServices, loadServiceNames, writeLoadUnits } from '../test/harness/dashboard-load.js';
import { buildDashboard, launchChromium } from '../test/browser/chromium.js';
import { countArgument, loadAverage, median, printTable, type BenchRow } from './table.js';

// Issue 31 item 5: the dashboard's first paint and memory with 200 services (5 units each, written
// into the store as in the browser test: test/harness/dashboard-load.ts), in Debian's headless
// Chromium. The Services tab, as before the graphs (uPlot is not loaded there), and a service page
// with its five graphs (uPlot loaded, an hour of 360 points per traffic series from a real gateway
// answering GET /traffic; no agent runs, so its machines are named as unreachable and the unit
// graphs are empty). Each page is opened fresh, rounds times; the JS heap is Chromium's own figure
// (CDP Performance.getMetrics, JSHeapUsedSize) after a forced garbage collection.
//   node dist/bench/dashboard.js [--services 200] [--units 5] [--rounds 3]

const { values: options } = parseArgs({ options: { services: { type: 'string' }, units: { type: 'string' }, rounds: { type: 'string' } } });
const SERVICES = countArgument(options.services, '--services', 200);
const UNITS = countArgument(options.units, '--units', 5);
const ROUNDS = countArgument(options.rounds, '--rounds', 3);
const REGISTRY = '127.0.0.1:5000';

interface PageFigures {
  firstPaintMs: number;
  /** The Services tab's snapshot rendered, or the service page's graphs drawn, after navigation start. */
  readyMs: number;
  heapMiB: number;
}

async function heapMiB(page: Page): Promise<number> {
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('HeapProfiler.collectGarbage');
  await cdp.send('Performance.enable');
  const { metrics } = await cdp.send('Performance.getMetrics');
  await cdp.detach();
  return (metrics.find((metric) => metric.name === 'JSHeapUsedSize')?.value ?? NaN) / 1024 / 1024;
}

async function measure(open: () => Promise<Page>, ready: (page: Page) => Promise<number>): Promise<PageFigures> {
  const page = await open();
  try {
    const readyMs = await ready(page);
    const firstPaintMs = await page.evaluate(() => (globalThis as any).performance.getEntriesByName('first-contentful-paint')[0]?.startTime as number);
    return { firstPaintMs, readyMs, heapMiB: await heapMiB(page) };
  } finally {
    await page.close();
  }
}

const etcd = await startEtcd();
const flags = ['--etcd', etcd.url, '--announce-ttl', '3'];
const roles: PlatformProcess[] = [];
const store = new EtcdStore([etcd.url]);
const rows: BenchRow[] = [];
try {
  const directory = await serveRole('directory', await freePort(), flags);
  roles.push(directory);
  const orchestrator = await serveRole('orchestrator', await freePort(), flags);
  roles.push(orchestrator);
  roles.push(await serveRole('gateway', await freePort(), [...flags, '--data-plane', 'node']));
  const names = loadServiceNames(SERVICES);
  await declareLoadServices(orchestrator.url, REGISTRY, names, UNITS);
  await writeLoadUnits(store, REGISTRY, names, UNITS, ['perf-a', 'perf-b', 'perf-c', 'perf-d']);
  buildDashboard();
  const browser = await launchChromium();
  const total = SERVICES * UNITS;
  const services: PageFigures[] = [];
  const servicePage: PageFigures[] = [];
  try {
    const open = (hash: string) => async () => {
      const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
      await page.goto(`${orchestrator.url}/${hash}`);
      return page;
    };
    for (let round = 0; round < ROUNDS; round++) {
      services.push(
        await measure(open('#/services'), async (page) => {
          // Functions given to waitForFunction and evaluate run in the browser.
          await page.waitForFunction((count) => (globalThis as any).document.querySelectorAll('.service-list .sq-green').length >= count, total, { timeout: 60_000 });
          return page.evaluate(() => (globalThis as any).dashboardStats.firstSnapshotRenderedAt as number);
        }),
      );
      servicePage.push(
        await measure(open(`#/services/${names[0]}`), async (page) => {
          await page.waitForFunction(() => (globalThis as any).performance.getEntriesByName('dashboard-graphs-drawn').length > 0, undefined, { timeout: 60_000 });
          return page.evaluate(() => (globalThis as any).performance.getEntriesByName('dashboard-graphs-drawn')[0].startTime as number);
        }),
      );
    }
  } finally {
    await browser.close();
  }
  const ms = (figures: PageFigures[], field: keyof PageFigures) => `${median(figures.map((f) => f[field])).toFixed(0)} ms`;
  const mib = (figures: PageFigures[]) => `${median(figures.map((f) => f.heapMiB)).toFixed(1)} MiB`;
  const ratio = (field: keyof PageFigures) => `${(median(servicePage.map((f) => f[field])) / median(services.map((f) => f[field]))).toFixed(2)}x`;
  const what = `${SERVICES} services × ${UNITS} units, median of ${ROUNDS}`;
  rows.push({ benchmark: `Services tab: first contentful paint (${what})`, platform: ms(services, 'firstPaintMs'), reference: '-', ratio: '-', target: '-' });
  rows.push({ benchmark: 'Services tab: snapshot rendered, after navigation start', platform: ms(services, 'readyMs'), reference: '0.69 s (docs/dashboard.md, before the graphs)', ratio: '-', target: '<= 1.5 s' });
  rows.push({ benchmark: 'Services tab: JS heap used after GC', platform: mib(services), reference: '-', ratio: '-', target: '-' });
  rows.push({ benchmark: 'service page with its graphs: first contentful paint', platform: ms(servicePage, 'firstPaintMs'), reference: `Services tab ${ms(services, 'firstPaintMs')}`, ratio: ratio('firstPaintMs'), target: '-' });
  rows.push({ benchmark: 'service page: five graphs drawn (uPlot loaded), after navigation start', platform: ms(servicePage, 'readyMs'), reference: `Services tab rendered ${ms(services, 'readyMs')}`, ratio: ratio('readyMs'), target: '<= 1.5 s' });
  rows.push({ benchmark: 'service page: JS heap used after GC', platform: mib(servicePage), reference: `Services tab ${mib(services)}`, ratio: ratio('heapMiB'), target: '-' });
} finally {
  console.log(`\nbench/dashboard.ts: load average at the end ${loadAverage()}`);
  printTable(rows);
  await store.close();
  await Promise.all(roles.map((role) => role.stop()));
  await etcd.stop();
}
