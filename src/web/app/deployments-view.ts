import type { App, View } from './app.js';
import type { Changes } from '../../client/cluster-state.js';
import { h } from './element.js';
import { formatTime, shortImage } from './format.js';
import { isFinished, isRunning, type Deployment, type DeploymentState } from './model.js';

// The Deployments tab: recent deployments with their state and progress, and the journal, both
// newest first.

const SHOWN = 100;

export class DeploymentsView implements View {
  readonly element: HTMLElement;
  readonly title = 'Deployments';
  private readonly deployments: HTMLTableSectionElement;
  private readonly journal: HTMLOListElement;

  constructor(private readonly app: App) {
    this.deployments = h('tbody', {});
    this.journal = h('ol', { class: 'journal', 'aria-label': 'Journal, newest first' });
    this.element = h(
      'section',
      { class: 'view deployments-view' },
      h('div', { class: 'view-head' }, h('h1', { tabindex: -1 }, 'Deployments')),
      h(
        'div',
        { class: 'table-scroll', tabindex: 0, role: 'region', 'aria-label': 'Deployments table' },
        h(
          'table',
          { class: 'deployments-table' },
          h('thead', {}, h('tr', {}, ...['Started', 'Service', 'Release', 'State', 'Trigger', 'Units', 'Image', 'Reason'].map((title) => h('th', { scope: 'col' }, title)))),
          this.deployments,
        ),
      ),
      h('h2', {}, 'Journal'),
      this.journal,
    );
  }

  update(changes: Changes): void {
    if (changes.everything || changes.deployments) this.renderDeployments();
    if (changes.everything || changes.journal) this.renderJournal();
  }

  private renderDeployments(): void {
    const rows = [...this.app.state.deployments.values()]
      .sort((a, b) => (a.id < b.id ? 1 : -1))
      .slice(0, SHOWN)
      .map((d) =>
        h(
          'tr',
          { 'data-deployment': d.id },
          h('td', { title: d.createdAt }, formatTime(d.createdAt)),
          h('td', {}, h('a', { href: `#/services/${encodeURIComponent(d.service)}` }, d.service)),
          h('td', {}, `v${d.release}`),
          h('td', {}, h('span', { class: `badge ${stateTone(d.state)}` }, d.state)),
          h('td', {}, d.trigger),
          h('td', {}, progress(d)),
          h('td', { class: 'mono' }, shortImage(d.image)),
          h('td', {}, d.reason ?? ''),
        ),
      );
    this.deployments.replaceChildren(...(rows.length ? rows : [h('tr', {}, h('td', { colspan: 8, class: 'muted' }, 'No deployments yet.'))]));
  }

  private renderJournal(): void {
    const entries = [...this.app.state.journal.values()].sort((a, b) => (a.id < b.id ? 1 : -1)).slice(0, 200);
    this.journal.replaceChildren(
      ...(entries.length
        ? entries.map((entry) =>
            h(
              'li',
              {},
              h('time', { datetime: entry.at }, formatTime(entry.at)),
              entry.service ? h('a', { href: `#/services/${encodeURIComponent(entry.service)}` }, entry.service) : h('span', {}, '—'),
              h('span', { class: 'kind' }, entry.kind),
              h('span', { class: 'message' }, entry.message),
            ),
          )
        : [h('li', { class: 'muted' }, 'The journal is empty.')]),
    );
  }
}

/** Ready of total while it rolls; afterwards how many units it placed. */
function progress(deployment: Deployment): string {
  if (deployment.units.length === 0) return '—';
  if (isFinished(deployment)) return String(deployment.units.length);
  return `${deployment.units.filter(isRunning).length}/${deployment.units.length}`;
}

function stateTone(state: DeploymentState): string {
  if (state === 'succeeded') return 'green';
  if (state === 'failed' || state === 'reverted') return 'red';
  return isFinished({ state }) ? '' : 'amber';
}
