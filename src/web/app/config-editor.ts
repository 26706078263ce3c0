import { api, ApiError } from './api.js';
import { h, setText } from './element.js';
import { clearErrors, field, showError } from './field-errors.js';
import type { ServiceConfig } from './model.js';
import { EnvRows, PortRows } from './row-editors.js';

// The next config of a service: number of units, environment variables and ports, saved with
// PATCH /services/:name/config/next (a merge patch: removed variables are sent as null). It takes
// effect at the next deploy. While it has unsaved edits, changes from elsewhere do not replace them.

export class ConfigEditor {
  readonly element: HTMLFormElement;
  private readonly numInstances: HTMLInputElement;
  private readonly env: EnvRows;
  private readonly ports: PortRows;
  private readonly status: HTMLElement;
  private readonly formError: HTMLElement;
  private readonly save: HTMLButtonElement;
  private saved: ServiceConfig | undefined;
  private dirty = false;

  constructor(private readonly service: string) {
    const edited = () => {
      this.dirty = true;
      setText(this.status, 'Unsaved changes');
    };
    this.numInstances = h('input', { type: 'number', inputmode: 'numeric', min: 0, max: 1000, oninput: edited });
    this.env = new EnvRows(edited, 'Environment variables');
    this.ports = new PortRows(edited, 'Ports');
    this.status = h('span', { class: 'save-status', role: 'status' });
    this.formError = h('p', { class: 'form-error', role: 'alert', hidden: true });
    this.save = h('button', { type: 'submit', class: 'button primary' }, 'Save next config');
    this.element = h(
      'form',
      { class: 'config-editor stack', novalidate: true, 'aria-labelledby': 'next-config-title', onsubmit: (event: Event) => void this.submit(event) },
      h('h2', { id: 'next-config-title' }, 'Next config'),
      h('p', { class: 'hint' }, 'What the next deploy uses. Saving does not restart anything.'),
      field('numInstances', 'Number of units', this.numInstances),
      this.env.element,
      this.ports.element,
      this.formError,
      h('div', { class: 'actions' }, h('button', { type: 'button', class: 'button', onclick: () => this.revert() }, 'Revert'), this.save, this.status),
    );
  }

  /** Shows `config` when it changed, unless the form holds unsaved edits. */
  load(config: ServiceConfig): void {
    if (this.dirty && this.saved) return;
    if (this.saved && JSON.stringify(config) === JSON.stringify(this.saved)) return;
    this.saved = config;
    this.numInstances.value = String(config.numInstances);
    this.env.set(config.env);
    this.ports.set(config.ports);
  }

  private revert(): void {
    this.dirty = false;
    clearErrors(this.element);
    this.formError.hidden = true;
    setText(this.status, '');
    const saved = this.saved;
    this.saved = undefined;
    if (saved) this.load(saved);
  }

  private async submit(event: Event): Promise<void> {
    event.preventDefault();
    if (this.save.getAttribute('aria-disabled')) return;
    clearErrors(this.element);
    this.formError.hidden = true;
    const env: Record<string, string | null> = this.env.read();
    for (const name of Object.keys(this.saved?.env ?? {})) if (!(name in env)) env[name] = null;
    const patch = {
      numInstances: this.numInstances.value.trim() === '' ? null : Number(this.numInstances.value),
      ports: this.ports.read(),
      env,
    };
    this.save.setAttribute('aria-disabled', 'true');
    setText(this.status, 'Saving…');
    try {
      const config = await api('PATCH /services/:name/config/next', { params: { name: this.service }, body: patch });
      this.dirty = false;
      this.load(config);
      setText(this.status, 'Saved. The next deploy uses it.');
    } catch (error) {
      setText(this.status, '');
      showError(this.element, error instanceof ApiError ? error.message : String(error), this.formError);
    } finally {
      this.save.removeAttribute('aria-disabled');
    }
  }
}
