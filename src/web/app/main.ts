import type { App, View } from './app.js';
import { ClusterState } from './cluster-state.js';
import { DeploymentsView } from './deployments-view.js';
import { h, setText } from './element.js';
import { connectLive, type LinkState } from './live.js';
import { MachinesView } from './machines-view.js';
import { ServicePage } from './service-page.js';
import { ServicesView } from './services-view.js';

// The dashboard: three tabs and a page per service, routed by the URL's hash, all fed by one
// event stream. Changes are applied as they arrive and rendered at most once per frame.

/** Render timings, read by the browser tests and handy in the console. */
interface DashboardStats {
  events: number;
  renders: number;
  lastRenderMs: number;
  maxRenderMs: number;
  /** Milliseconds after navigation start: the scripts ran, the first snapshot arrived, and was rendered. */
  startedAt: number;
  firstSnapshotAt?: number;
  firstSnapshotRenderedAt?: number;
}

declare global {
  interface Window {
    dashboardStats: DashboardStats;
  }
}

const tabs = [
  { hash: '#/services', label: 'Services' },
  { hash: '#/machines', label: 'Machines' },
  { hash: '#/deployments', label: 'Deployments' },
];

const stats: DashboardStats = { events: 0, renders: 0, lastRenderMs: 0, maxRenderMs: 0, startedAt: performance.now() };
window.dashboardStats = stats;

const state = new ClusterState();
const main = document.getElementById('main')!;
const link = h('span', { class: 'link connecting', role: 'status' }, 'Connecting…');
const nav = h('nav', { 'aria-label': 'Sections' }, h('ul', {}, tabs.map((tab) => h('li', {}, h('a', { href: tab.hash }, tab.label)))));
document.getElementById('header')!.append(h('a', { class: 'brand', href: '#/services' }, 'platform'), nav, link);

let live = false;
let view: View | undefined;
let frame: number | undefined;

const app: App = {
  state,
  requestRender: () => {
    frame ??= requestAnimationFrame(render);
  },
  isLive: () => live,
  navigate: (hash) => {
    if (location.hash === hash) route();
    else location.hash = hash;
  },
};

function render(): void {
  frame = undefined;
  const started = performance.now();
  const changes = state.takeChanges();
  view?.update(changes);
  const took = performance.now() - started;
  stats.renders += 1;
  stats.lastRenderMs = took;
  stats.maxRenderMs = Math.max(stats.maxRenderMs, took);
  if (changes.everything && stats.firstSnapshotRenderedAt === undefined && state.loaded) {
    stats.firstSnapshotRenderedAt = performance.now();
    performance.mark('dashboard-rendered');
  }
}

function viewFor(hash: string): View {
  const service = /^#\/services\/(.+)$/.exec(hash);
  if (service) return new ServicePage(app, decodeURIComponent(service[1]!));
  if (hash === '#/machines') return new MachinesView(app);
  if (hash === '#/deployments') return new DeploymentsView(app);
  return new ServicesView(app);
}

function route(): void {
  // In-page anchors such as the skip link are not routes.
  if (view && location.hash && !location.hash.startsWith('#/')) return;
  const hash = location.hash.startsWith('#/') ? location.hash : '#/services';
  const previous = view;
  previous?.dispose?.();
  view = viewFor(hash);
  main.replaceChildren(view.element);
  document.title = `${view.title} · platform`;
  for (const anchor of nav.querySelectorAll('a')) {
    const current = hash === anchor.getAttribute('href') || hash.startsWith(`${anchor.getAttribute('href')}/`);
    if (current) anchor.setAttribute('aria-current', 'page');
    else anchor.removeAttribute('aria-current');
  }
  view.update({ everything: true, services: new Set(), machines: new Set(), deployments: true, journal: true });
  // Moving focus to the new heading tells screen readers and keyboard users the page changed.
  if (previous) view.element.querySelector<HTMLElement>('h1')?.focus();
}

function linkChanged(state: LinkState): void {
  live = state === 'live';
  link.className = `link ${state}`;
  setText(link, state === 'live' ? 'Live' : state === 'connecting' ? 'Connecting…' : 'Reconnecting…');
  app.requestRender();
}

window.addEventListener('hashchange', route);
route();
connectLive(
  state,
  () => {
    stats.events += 1;
    if (stats.firstSnapshotAt === undefined && state.loaded) stats.firstSnapshotAt = performance.now();
    app.requestRender();
  },
  linkChanged,
);
