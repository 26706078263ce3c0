import type { App, View } from './app.js';
import type { Changes } from '../../client/cluster-state.js';
import { DeployControl } from './deploy-control.js';
import { h, setText } from './element.js';
import { plural } from './format.js';
import { isRunning, type Service, type Unit } from './model.js';
import { CreateServiceDialog } from './service-form.js';
import { allowWhen } from './permissions.js';
import { legend, renderUnits, serviceSquares } from './unit-square.js';

// The Services tab: every service with its units as squares, desired and running counts, the
// release its units run, and a Deploy button. Rows are kept per service and patched in place, so
// a burst of unit events re-renders only the services they touch and focus stays where it is.

export class ServicesView implements View {
  readonly element: HTMLElement;
  readonly title = 'Services';
  private readonly rows = new Map<string, ServiceRow>();
  private readonly list: HTMLUListElement;
  private readonly summary: HTMLElement;
  private readonly empty: HTMLElement;
  private readonly filter: HTMLInputElement;
  private readonly dialog: CreateServiceDialog;
  private focusWhenShown: string | undefined;

  constructor(private readonly app: App) {
    this.dialog = new CreateServiceDialog((name) => {
      this.focusWhenShown = name;
      this.app.requestRender();
    });
    this.filter = h('input', { type: 'search', class: 'filter', placeholder: 'Filter by name', 'aria-label': 'Filter services by name', oninput: () => this.applyFilter() });
    this.summary = h('p', { class: 'summary', role: 'status' });
    this.list = h('ul', { class: 'service-list', 'aria-label': 'Services' });
    this.empty = h('p', { class: 'empty', hidden: true }, 'No services yet. Declare one with “New service”.');
    this.element = h(
      'section',
      { class: 'view services-view' },
      h(
        'div',
        { class: 'view-head' },
        h('h1', { tabindex: -1 }, 'Services'),
        this.newServiceButton(),
      ),
      h('div', { class: 'toolbar' }, this.filter, legend()),
      this.summary,
      this.list,
      this.empty,
      this.dialog.element,
    );
  }

  private newServiceButton(): HTMLButtonElement {
    const button = h('button', { type: 'button', class: 'button primary', onclick: () => this.dialog.open() }, 'New service');
    allowWhen(button, this.app.refusal('admin'));
    return button;
  }

  update(changes: Changes): void {
    const { state } = this.app;
    const names = changes.everything ? new Set([...state.services.keys(), ...this.rows.keys()]) : changes.services;
    const added: string[] = [];
    for (const name of names) {
      const service = state.services.get(name);
      const row = this.rows.get(name);
      if (!service) {
        row?.remove();
        this.rows.delete(name);
      } else if (row) {
        row.update(service, state.unitsOf(name));
      } else {
        const created = new ServiceRow(this.app, service, state.unitsOf(name));
        this.rows.set(name, created);
        added.push(name);
      }
    }
    if (added.length) this.insertInOrder(added);
    if (names.size) this.updateSummary();
    if (this.focusWhenShown && this.rows.has(this.focusWhenShown)) {
      this.rows.get(this.focusWhenShown)!.focus();
      this.focusWhenShown = undefined;
    }
  }

  dispose(): void {
    for (const row of this.rows.values()) row.remove();
  }

  /** New rows go before the first row whose name sorts after theirs; existing rows never move. */
  private insertInOrder(added: string[]): void {
    const sorted = [...this.rows.keys()].sort();
    const fresh = new Set(added);
    const filter = this.filter.value.trim();
    let next: Element | null = null;
    for (let i = sorted.length - 1; i >= 0; i--) {
      const row = this.rows.get(sorted[i]!)!;
      if (fresh.has(sorted[i]!)) {
        row.element.hidden = filter !== '' && !sorted[i]!.includes(filter);
        this.list.insertBefore(row.element, next);
      }
      next = row.element;
    }
  }

  private updateSummary(): void {
    const { state } = this.app;
    let running = 0;
    for (const unit of state.units.values()) if (unit.desired && isRunning(unit)) running++;
    setText(this.summary, state.loaded ? `${plural(state.services.size, 'service')} · ${plural(state.units.size, 'unit')}, ${running} running` : 'Loading…');
    this.empty.hidden = !state.loaded || state.services.size > 0;
  }

  private applyFilter(): void {
    const filter = this.filter.value.trim();
    for (const [name, row] of this.rows) row.element.hidden = filter !== '' && !name.includes(filter);
  }
}

class ServiceRow {
  readonly element: HTMLLIElement;
  private readonly link: HTMLAnchorElement;
  private readonly description: HTMLElement;
  private readonly squares: HTMLElement;
  private readonly counts: HTMLElement;
  private readonly release: HTMLElement;
  private readonly deploy: DeployControl;

  constructor(
    private readonly app: App,
    service: Service,
    units: Unit[],
  ) {
    this.link = h('a', { href: `#/services/${encodeURIComponent(service.name)}`, class: 'service-name' }, service.name);
    this.description = h('span', { class: 'description' });
    this.squares = h('div', { class: 'squares', role: 'group', 'aria-label': `Units of ${service.name}` });
    this.counts = h('span', { class: 'counts' });
    this.release = h('span', { class: 'current-release' });
    this.deploy = new DeployControl(app, service.name);
    this.element = h(
      'li',
      { class: 'service-row', 'data-service': service.name },
      h('div', { class: 'service-title' }, this.link, this.description),
      this.squares,
      h('div', { class: 'service-facts' }, this.counts, this.release),
      this.deploy.element,
    );
    this.update(service, units);
  }

  update(service: Service, units: Unit[]): void {
    const deployed = this.app.state.isDeployed(service.name);
    setText(this.description, service.description);
    renderUnits(this.squares, serviceSquares(service, units, deployed), 'machine');
    const { running, desired, releases } = countUnits(units);
    const wanted = deployed ? (this.app.state.wantedUnits(service.name) ?? desired) : service.config.numInstances;
    setText(this.counts, `${running}/${wanted} running${deployed && desired !== wanted ? ` (${desired} placed)` : ''}`);
    this.counts.title = `${running} running of ${wanted} wanted units, ${desired} placed on machines`;
    setText(this.release, releases.length ? releases.map((v) => `v${v}`).join(' → ') : '—');
    this.release.title = releases.length ? 'the release its units run' : 'no release runs';
    this.deploy.update();
  }

  focus(): void {
    this.link.focus();
    this.element.scrollIntoView({ block: 'nearest' });
  }

  remove(): void {
    this.deploy.dispose();
    this.element.remove();
  }
}

/** Desired units are counted by name (a unit being replaced has two slots for a moment). */
export function countUnits(units: Unit[]): { running: number; desired: number; releases: number[] } {
  const desired = new Set<string>();
  const running = new Set<string>();
  const releases = new Set<number>();
  for (const unit of units) {
    if (!unit.desired) continue;
    desired.add(unit.unit);
    releases.add(unit.release);
    if (isRunning(unit)) running.add(unit.unit);
  }
  return { running: running.size, desired: desired.size, releases: [...releases].sort((a, b) => a - b) };
}
