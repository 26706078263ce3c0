import { api, ApiError, forgetSessionProof } from './api.js';
import type { App, View } from './app.js';
import { ClusterState } from '../../client/cluster-state.js';
import { DeploymentsView } from './deployments-view.js';
import { h, setText } from './element.js';
import { connectLive, type LinkState } from './live.js';
import { MachinesView } from './machines-view.js';
import type { SessionInfo } from './model.js';
import { refusal, sessionNote } from './permissions.js';
import { ServicePage } from './service-page.js';
import { ServicesView } from './services-view.js';
import { SignInView } from './sign-in.js';

// The dashboard: three tabs and a page per service, routed by the URL's hash, all fed by one
// event stream. Changes are applied as they arrive and rendered at most once per frame. It first
// asks who it acts as (GET /session): when the API wants a token and the page has no session, it
// shows the sign-in page instead, and reads no data.

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
const header = document.getElementById('header')!;
const brand = h('a', { class: 'brand', href: '#/services' }, 'platform');
const link = h('span', { class: 'link connecting', role: 'status' }, 'Connecting…');
const nav = h('nav', { 'aria-label': 'Sections' }, h('ul', {}, tabs.map((tab) => h('li', {}, h('a', { href: tab.hash }, tab.label)))));

let live = false;
let view: View | undefined;
let frame: number | undefined;
let session: SessionInfo = { via: 'none' };

const app: App = {
  state,
  get session() {
    return session;
  },
  refusal: (need, service) => refusal(session, need, service),
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
  // A stream refused because the session ended (its token revoked or expired): sign in again.
  if (state === 'reconnecting' && session.via === 'session') void whoAmI().then((now) => typeof now === 'string' && signInAgain(now));
  app.requestRender();
}

/** GET /session, or why the API wants a token the page does not have (its 401). */
async function whoAmI(): Promise<SessionInfo | string> {
  try {
    return await api('GET /session');
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      forgetSessionProof();
      return error.message;
    }
    // Unreachable or failing: the dashboard starts as before and the API decides each call.
    return { via: 'none' };
  }
}

/** Starts the page again at the sign-in form, which says why the session ended (the guard cleared its cookie). */
function signInAgain(reason: string): void {
  sessionStorage.setItem(ENDED_KEY, reason);
  location.reload();
}

const ENDED_KEY = 'platform.sessionEnded';

/** What the sign-in page says: why the last session ended, or that a token is needed. */
function signInReason(refusal: string): string {
  const ended = sessionStorage.getItem(ENDED_KEY) ?? refusal;
  sessionStorage.removeItem(ENDED_KEY);
  return ended.startsWith('the session') ? `${ended[0]!.toUpperCase()}${ended.slice(1)}.` : 'This platform shows its services only to callers with an access token. Sign in with one.';
}

function sessionControls(): HTMLElement[] {
  if (session.via !== 'session' || !session.token) return [];
  const signOut = async () => {
    await api('DELETE /session').catch(() => undefined);
    forgetSessionProof();
    location.reload();
  };
  return [h('span', { class: 'session' }, `Signed in as ${session.token.name} (${session.token.role})`, h('button', { type: 'button', class: 'button', onclick: () => void signOut() }, 'Sign out'))];
}

function showSignIn(reason: string): void {
  header.append(h('span', { class: 'brand' }, 'platform'));
  view = new SignInView(reason);
  main.replaceChildren(view.element);
  document.title = `${view.title} · platform`;
  view.update({ everything: true, services: new Set(), machines: new Set(), deployments: true, journal: true });
}

function startDashboard(): void {
  header.append(brand, nav, link, ...sessionControls());
  const note = sessionNote(session);
  if (note) main.before(h('p', { class: 'read-only-note', role: 'note' }, note));
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
}

const found = await whoAmI();
if (typeof found === 'string') {
  showSignIn(signInReason(found));
} else {
  sessionStorage.removeItem(ENDED_KEY);
  session = found;
  startDashboard();
}
