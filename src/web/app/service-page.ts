import { api, ApiError } from './api.js';
import type { App, View } from './app.js';
import type { Changes } from '../../client/cluster-state.js';
import { ConfigEditor } from './config-editor.js';
import { DeployControl } from './deploy-control.js';
import { h, setText } from './element.js';
import { formatTime, shortImage } from './format.js';
import { LogTail } from './log-tail.js';
import { isRunning, type Service, type Unit } from './model.js';
import { ReleasesView } from './releases-view.js';
import { ServiceGraphs } from './service-graphs.js';
import { allowWhen } from './permissions.js';
import { CertificateStatus } from './certificate-status.js';
import { countUnits } from './services-view.js';
import { renderUnits, serviceSquares, toneOf } from './unit-square.js';

// One service: its declaration, Deploy, its units (squares and a table with a log tail per unit),
// the next config editor, its releases with diffs and roll back, and delete with confirmation.

export class ServicePage implements View {
  readonly element: HTMLElement;
  readonly title: string;
  private readonly heading: HTMLElement;
  private readonly description: HTMLElement;
  private readonly facts: HTMLElement;
  private readonly certificate: CertificateStatus;
  private readonly squares: HTMLElement;
  private readonly counts: HTMLElement;
  private readonly unitRows = new Map<string, UnitRow>();
  private readonly unitBody: HTMLTableSectionElement;
  private readonly noUnits: HTMLElement;
  private readonly deploy: DeployControl;
  private readonly config: ConfigEditor;
  private readonly releases: ReleasesView;
  private readonly logs: LogTail;
  private readonly graphs: ServiceGraphs;
  private readonly confirm: HTMLDialogElement;
  private readonly deleteStatus: HTMLElement;
  private readonly content: HTMLElement;
  private readonly missing: HTMLElement;
  private deleting = false;

  constructor(
    private readonly app: App,
    private readonly name: string,
  ) {
    this.title = name;
    this.heading = h('h1', { tabindex: -1 }, name);
    this.description = h('p', { class: 'lead' });
    this.facts = h('dl', { class: 'facts' });
    this.certificate = new CertificateStatus(name);
    this.squares = h('div', { class: 'squares large', role: 'group', 'aria-label': `Units of ${name}` });
    this.counts = h('p', { class: 'counts' });
    this.deploy = new DeployControl(app, name, { pickTag: true });
    this.config = new ConfigEditor(name);
    this.releases = new ReleasesView(app, name);
    this.logs = new LogTail(name);
    this.graphs = new ServiceGraphs(name);
    this.deleteStatus = h('p', { class: 'form-error', role: 'alert', hidden: true });
    this.confirm = this.confirmDialog();
    this.unitBody = h('tbody', {});
    this.noUnits = h('p', { class: 'muted' }, 'No units: deploy the service to start them.');
    this.missing = h('p', { class: 'empty', hidden: true });
    this.content = h(
      'div',
      { class: 'service-page' },
      h(
        'div',
        { class: 'view-head' },
        h('div', {}, this.heading, this.description),
        h('div', { class: 'head-actions' }, this.deploy.element, this.deleteButton()),
      ),
      this.deleteStatus,
      this.facts,
      this.certificate.element,
      this.graphs.element,
      h(
        'section',
        { class: 'panel', 'aria-labelledby': 'units-title' },
        h('h2', { id: 'units-title' }, 'Units'),
        this.squares,
        this.counts,
        h(
          'div',
          { class: 'table-scroll', tabindex: 0, role: 'region', 'aria-label': 'Units table' },
          h(
            'table',
            { class: 'units-table' },
            h('thead', {}, h('tr', {}, ...['Unit', 'Machine', 'ACTIVE', 'SUB', 'Release', 'Restarts', 'Address', ''].map((title) => h('th', { scope: 'col' }, title)))),
            this.unitBody,
          ),
        ),
        this.noUnits,
      ),
      this.logs.element,
      h('div', { class: 'columns' }, h('section', { class: 'panel' }, this.config.element), this.releases.element),
      this.confirm,
    );
    this.element = h('section', { class: 'view' }, h('p', { class: 'crumbs' }, h('a', { href: '#/services' }, '← Services')), this.missing, this.content);
    this.graphs.start();
  }

  update(changes: Changes): void {
    if (changes.everything || changes.journal || changes.services.has(this.name)) this.refreshCertificate();
    if (!changes.everything && !changes.services.has(this.name)) return;
    const { state } = this.app;
    const service = state.services.get(this.name);
    this.content.hidden = !service;
    this.missing.hidden = Boolean(service);
    if (!service) {
      this.logs.stop();
      setText(this.missing, state.loaded ? (this.deleting ? `${this.name} was deleted.` : `There is no service named ${this.name}.`) : 'Loading…');
      return;
    }
    const units = state.unitsOf(this.name);
    this.renderHeader(service);
    this.config.load(service.config);
    this.deploy.update();
    renderUnits(this.squares, serviceSquares(service, units, state.isDeployed(this.name)), 'machine');
    const { running, desired } = countUnits(units);
    const wanted = state.wantedUnits(this.name) ?? desired;
    const placed = desired === wanted ? '' : `, ${desired} placed`;
    setText(this.counts, `${running} of ${wanted} wanted units running${placed}${units.length > desired ? ` (${units.length} containers while units are replaced)` : ''}`);
    this.renderUnits(units);
    const runningReleases = [...new Set(units.filter((u) => u.desired && isRunning(u)).map((u) => u.release))].sort((a, b) => a - b);
    this.releases.update(service.config, runningReleases);
  }

  /** Certificates are not in the event stream; their journal lines (issued, renewed, failed) say when to look again. */
  private refreshCertificate(): void {
    const { state } = this.app;
    const service = state.services.get(this.name);
    if (!service) return;
    const lines = [...state.journal.values()].filter((entry) => entry.service === this.name && entry.kind.startsWith('certificate.')).length;
    this.certificate.refresh(`${service.publicFacing} ${service.loadBalanced} ${lines}`);
  }

  dispose(): void {
    this.logs.stop();
    this.graphs.stop();
    this.deploy.dispose();
  }

  private renderHeader(service: Service): void {
    setText(this.description, service.description || 'No description.');
    const facts: [string, string][] = [
      ['Container repository', service.containerImage],
      ['Load balanced', service.loadBalanced ? 'yes' : 'no'],
      ['Public facing', service.publicFacing ? 'yes' : 'no'],
      ['Auto deploy', service.autoDeploy],
      ['Conflicts with', service.conflictsWith || 'none'],
      ['Declared', formatTime(service.createdAt)],
    ];
    const signature = JSON.stringify(facts);
    if (this.facts.dataset.signature === signature) return;
    this.facts.dataset.signature = signature;
    this.facts.replaceChildren(...facts.map(([term, value]) => h('div', {}, h('dt', {}, term), h('dd', {}, value))));
  }

  private renderUnits(units: Unit[]): void {
    const keys = new Set<string>();
    let previous: Element | null = null;
    for (const unit of units) {
      const key = `${unit.machine}/${unit.unit}@${unit.spec ?? unit.release}`;
      keys.add(key);
      let row = this.unitRows.get(key);
      if (!row) {
        row = new UnitRow((name) => this.logs.open(name));
        this.unitRows.set(key, row);
      }
      row.update(unit);
      const expected: Element | null = previous ? previous.nextElementSibling : this.unitBody.firstElementChild;
      if (expected !== row.element) this.unitBody.insertBefore(row.element, expected);
      previous = row.element;
    }
    for (const [key, row] of this.unitRows) {
      if (!keys.has(key)) {
        row.element.remove();
        this.unitRows.delete(key);
      }
    }
    this.noUnits.hidden = units.length > 0;
  }

  private confirmDialog(): HTMLDialogElement {
    const dialog: HTMLDialogElement = h(
      'dialog',
      { class: 'dialog', 'aria-labelledby': 'delete-title' },
      h(
        'form',
        { method: 'dialog', class: 'stack' },
        h('h2', { id: 'delete-title' }, `Delete ${this.name}?`),
        h('p', {}, 'Its units are stopped first, then its declaration is deleted. Its releases stay in the history.'),
        h(
          'div',
          { class: 'actions' },
          h('button', { type: 'submit', value: 'cancel', class: 'button', autofocus: true }, 'Cancel'),
          h('button', { type: 'submit', value: 'delete', class: 'button danger' }, `Delete ${this.name}`),
        ),
      ),
    );
    dialog.addEventListener('close', () => {
      if (dialog.returnValue === 'delete') void this.delete();
    });
    return dialog;
  }

  private deleteButton(): HTMLButtonElement {
    const button = h('button', { type: 'button', class: 'button danger', onclick: () => this.askDelete() }, 'Delete service');
    allowWhen(button, this.app.refusal('admin'));
    return button;
  }

  private askDelete(): void {
    this.confirm.returnValue = '';
    this.confirm.showModal();
  }

  private async delete(): Promise<void> {
    this.deleting = true;
    this.deleteStatus.hidden = false;
    this.deleteStatus.classList.add('info');
    setText(this.deleteStatus, `Deleting ${this.name}: stopping its units…`);
    try {
      await api('DELETE /services/:name', { params: { name: this.name } });
      this.app.navigate('#/services');
    } catch (error) {
      this.deleting = false;
      this.deleteStatus.classList.remove('info');
      setText(this.deleteStatus, `Delete failed: ${error instanceof ApiError ? error.message : String(error)}`);
    }
  }
}

class UnitRow {
  readonly element: HTMLTableRowElement;
  private readonly cells: HTMLTableCellElement[];
  private readonly logButton: HTMLButtonElement;
  private unitName = '';

  constructor(openLogs: (unit: string) => void) {
    this.cells = Array.from({ length: 7 }, () => h('td', {}));
    this.logButton = h('button', { type: 'button', class: 'button subtle', onclick: () => openLogs(this.unitName) }, 'Logs');
    this.element = h('tr', {}, ...this.cells, h('td', {}, this.logButton));
  }

  update(unit: Unit): void {
    this.unitName = unit.unit;
    const values = [unit.unit, unit.machine, unit.active, unit.sub, `v${unit.release}${unit.desired ? '' : ' (stopping)'}`, String(unit.restarts), unit.address ?? '—'];
    values.forEach((value, i) => setText(this.cells[i]!, value));
    this.cells[0]!.className = `unit-cell tone-${toneOf(unit)}`;
    this.cells[0]!.title = unit.error ?? shortImage(unit.image);
    this.logButton.setAttribute('aria-label', `Logs of ${unit.unit}`);
  }
}
