import type uPlot from 'uplot';
import { api, ApiError } from './api.js';
import { h, setText } from './element.js';
import type { ServiceMetrics, UnitUsage } from '../../schemas/service-metrics.js';

// The service page's graphs of the last hour: requests per second, 5xx answers per second and the
// 95th percentile latency from the gateways, and CPU and memory per unit from the engines, drawn
// with uPlot (assets/vendor/, copied from the npm package by assemble.mjs). uPlot is loaded when
// the first service page opens, so the Services tab's first paint does not parse it.
//
// Live by polling: the figures are made on a clock (one point per interval, by gateways and
// agents, not in the store), so the page asks for them once per interval while it is open. The
// event stream carries the store's changes to every page; samples of every service would be sent
// to every viewer whatever it shows.

type UPlotModule = { default: typeof uPlot };

/** From this module's place (assets/js/web/app/) to the vendored copy; not a static import, so assemble.mjs does not follow it. */
const UPLOT_URL = new URL('../../../vendor/uplot/uPlot.esm.js', import.meta.url).href;
let uplotModule: Promise<UPlotModule> | undefined;
const loadUplot = (): Promise<UPlotModule> => (uplotModule ??= import(UPLOT_URL) as Promise<UPlotModule>);

/** Units drawn one line each up to this many; above it, their sum and the busiest unit, which stay readable. */
const UNIT_LINES = 12;
const PALETTE = ['#0550ae', '#1a7f37', '#bf8700', '#8250df', '#cf222e', '#1b7c83', '#953800', '#6e7781', '#bf3989', '#116329', '#0a3069', '#4d2d00'];
const MIB = 1024 * 1024;
const GRAPHS_DRAWN = 'dashboard-graphs-drawn';

interface ChartSpec {
  title: string;
  unit: string;
}

const CHARTS = {
  requests: { title: 'Requests per second', unit: 'req/s' },
  errors: { title: '5xx errors per second', unit: 'errors/s' },
  latency: { title: 'Latency p95 (ms)', unit: 'ms' },
  cpu: { title: 'CPU per unit (cores)', unit: 'cores' },
  memory: { title: 'Memory per unit (MiB)', unit: 'MiB' },
} satisfies Record<string, ChartSpec>;
type ChartName = keyof typeof CHARTS;

/** One chart's data: x in Unix seconds, then one array per series. */
export interface ChartData {
  labels: string[];
  columns: (number | null)[][];
}

/** The hour every graph spans (Unix seconds), so the unit graphs line up with the traffic ones. */
type TimeWindow = [number, number];

declare global {
  interface Window {
    /** The charts of the open service page, by title: read by the browser tests. */
    dashboardCharts?: Record<string, uPlot>;
  }
}

/** Per-unit lines, or with many units their sum and the busiest unit, on the union of the units' points. */
export function unitColumns(units: UnitUsage[], value: (sample: UnitUsage['samples'][number]) => number | null): ChartData {
  const times = [...new Set(units.flatMap((unit) => unit.samples.map((sample) => sample.at)))].sort((a, b) => a - b);
  const index = new Map(times.map((at, i) => [at, i]));
  const perUnit = units.map((unit) => {
    const column = new Array<number | null>(times.length).fill(null);
    for (const sample of unit.samples) column[index.get(sample.at)!] = value(sample);
    return column;
  });
  const x = times.map((at) => at / 1000);
  if (units.length <= UNIT_LINES) return { labels: units.map((unit) => unit.unit), columns: [x, ...perUnit] };
  const sum = times.map((_, i) => perUnit.reduce<number | null>((total, column) => (column[i] === null ? total : (total ?? 0) + column[i]!), null));
  const max = times.map((_, i) => perUnit.reduce<number | null>((top, column) => (column[i] === null ? top : Math.max(top ?? 0, column[i]!)), null));
  return { labels: [`all ${units.length} units`, 'busiest unit'], columns: [x, sum, max] };
}

export function chartData(metrics: ServiceMetrics): Record<ChartName, ChartData> {
  const x = metrics.traffic.map((point) => point.at / 1000);
  return {
    requests: { labels: ['requests/s'], columns: [x, metrics.traffic.map((point) => point.requestsPerSecond)] },
    errors: { labels: ['5xx/s'], columns: [x, metrics.traffic.map((point) => point.errorsPerSecond)] },
    latency: { labels: ['p95'], columns: [x, metrics.traffic.map((point) => (point.p95Seconds === null ? null : point.p95Seconds * 1000))] },
    cpu: unitColumns(metrics.units, (sample) => sample.cpu),
    memory: unitColumns(metrics.units, (sample) => sample.memoryBytes / MIB),
  };
}

class Chart {
  readonly element: HTMLElement;
  private readonly plotArea: HTMLElement;
  private plot: uPlot | undefined;
  private labels = '';
  private span: TimeWindow = [0, 1];

  constructor(private readonly spec: ChartSpec) {
    this.plotArea = h('div', { class: 'chart-plot' });
    this.element = h('figure', { class: 'chart', 'aria-label': spec.title }, h('figcaption', {}, spec.title), this.plotArea);
  }

  draw(library: typeof uPlot, data: ChartData, span: TimeWindow): void {
    this.span = span;
    const labels = data.labels.join('\n');
    if (this.plot && labels === this.labels) {
      this.plot.setData(data.columns as uPlot.AlignedData);
      return;
    }
    this.plot?.destroy();
    this.labels = labels;
    const width = Math.max(240, this.plotArea.clientWidth || 360);
    this.plot = new library(
      {
        width,
        height: 180,
        scales: { x: { time: true, range: () => this.span }, y: { range: (_u, min, max) => [0, Math.max(max, min, 0) * 1.1 || 1] } },
        axes: [{}, { label: this.spec.unit, size: 56 }],
        series: [{}, ...data.labels.map((label, i) => ({ label, stroke: PALETTE[i % PALETTE.length]!, width: 1.5, spanGaps: false }))],
        legend: { show: true, live: false },
      },
      data.columns as uPlot.AlignedData,
      this.plotArea,
    );
    (window.dashboardCharts ??= {})[this.spec.title] = this.plot;
  }

  resize(): void {
    if (this.plot && this.plotArea.clientWidth > 0) this.plot.setSize({ width: this.plotArea.clientWidth, height: 180 });
  }

  destroy(): void {
    this.plot?.destroy();
    const charts = window.dashboardCharts;
    if (charts && this.plot && charts[this.spec.title] === this.plot) delete charts[this.spec.title];
  }
}

export class ServiceGraphs {
  readonly element: HTMLElement;
  private readonly note: HTMLElement;
  private readonly charts: Record<ChartName, Chart>;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private readonly resizes: ResizeObserver;
  private stopped = false;

  constructor(private readonly service: string) {
    this.charts = Object.fromEntries(Object.entries(CHARTS).map(([name, spec]) => [name, new Chart(spec)])) as Record<ChartName, Chart>;
    this.note = h('p', { class: 'muted graphs-note', role: 'status' }, 'Loading the last hour…');
    this.element = h(
      'section',
      { class: 'panel graphs', 'aria-labelledby': 'graphs-title' },
      h('h2', { id: 'graphs-title' }, 'Last hour'),
      this.note,
      h('div', { class: 'chart-grid' }, ...Object.values(this.charts).map((chart) => chart.element)),
    );
    this.resizes = new ResizeObserver(() => Object.values(this.charts).forEach((chart) => chart.resize()));
  }

  start(): void {
    this.resizes.observe(this.element);
    void this.poll();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.resizes.disconnect();
    Object.values(this.charts).forEach((chart) => chart.destroy());
  }

  private async poll(): Promise<void> {
    let intervalSeconds = 10;
    try {
      const [metrics, library] = await Promise.all([api('GET /services/:name/metrics', { params: { name: this.service } }), loadUplot()]);
      if (this.stopped) return;
      intervalSeconds = metrics.intervalSeconds;
      const data = chartData(metrics);
      const step = metrics.intervalSeconds;
      const span: TimeWindow = [(metrics.traffic[0]?.at ?? Date.now() - 3_600_000) / 1000, (metrics.traffic.at(-1)?.at ?? Date.now()) / 1000 + step];
      for (const name of Object.keys(this.charts) as ChartName[]) this.charts[name].draw(library.default, data[name], span);
      setText(this.note, describeSources(metrics));
      // When the page first showed graphs, for bench/dashboard.ts.
      if (performance.getEntriesByName(GRAPHS_DRAWN).length === 0) performance.mark(GRAPHS_DRAWN);
    } catch (error) {
      setText(this.note, `Graphs unavailable: ${error instanceof ApiError ? error.message : String(error)}`);
    }
    if (!this.stopped) this.timer = setTimeout(() => void this.poll(), intervalSeconds * 1000);
  }
}

function describeSources(metrics: ServiceMetrics): string {
  const requests = metrics.traffic.some((point) => point.requestsPerSecond > 0);
  const parts = [`One point per ${metrics.intervalSeconds} s, updated live.`];
  if (!requests) parts.push('No request reached the service through a gateway in the last hour.');
  if (metrics.units.length === 0) parts.push('No unit has run long enough to be measured.');
  if (metrics.unreachable.length > 0) parts.push(`Missing figures: ${metrics.unreachable.join('; ')}.`);
  return parts.join(' ');
}
