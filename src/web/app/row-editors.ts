import { h, uniqueId } from './element.js';
import type { PortMapping } from './model.js';

// Editable rows for environment variables and ports, shared by the create form and the config
// editor. Reading them labels each row with the field name the API will use in its errors
// (`env.NAME`, `ports.0.container`), so a 400 lands beside the right input.

export class EnvRows {
  readonly element: HTMLElement;
  private readonly rows: HTMLElement;

  constructor(
    private readonly onChange: () => void = () => undefined,
    legend = 'Environment variables (optional)',
  ) {
    this.rows = h('div', { class: 'rows' });
    this.element = h(
      'fieldset',
      { class: 'row-editor', 'data-field': 'env' },
      h('legend', {}, legend),
      this.rows,
      h('button', { type: 'button', class: 'button', onclick: () => this.add('', '', true) }, 'Add variable'),
      h('p', { class: 'field-error', hidden: true, id: uniqueId('env-error') }),
    );
  }

  set(env: Record<string, string>): void {
    this.rows.replaceChildren();
    for (const [name, value] of Object.entries(env).sort(([a], [b]) => a.localeCompare(b))) this.add(name, value, false);
  }

  add(name: string, value: string, focus: boolean): void {
    const nameInput = h('input', { class: 'env-name', value: name, 'aria-label': 'Variable name', placeholder: 'NAME', autocomplete: 'off', spellcheck: 'false', oninput: this.onChange });
    const valueInput = h('input', { class: 'env-value', value, 'aria-label': 'Value', placeholder: 'value', autocomplete: 'off', spellcheck: 'false', oninput: this.onChange });
    const row: HTMLElement = h(
      'div',
      { class: 'row' },
      nameInput,
      h('span', { class: 'equals', 'aria-hidden': 'true' }, '='),
      valueInput,
      h('button', { type: 'button', class: 'button subtle', 'aria-label': 'Remove variable', onclick: () => this.remove(row) }, 'Remove'),
    );
    this.rows.appendChild(row);
    if (focus) nameInput.focus();
  }

  /** The variables entered, rows without a name left out. */
  read(): Record<string, string> {
    const env: Record<string, string> = {};
    for (const row of this.rows.children) {
      const name = (row.querySelector('.env-name') as HTMLInputElement).value.trim();
      const value = (row.querySelector('.env-value') as HTMLInputElement).value;
      row.setAttribute('data-field', `env.${name}`);
      if (name) env[name] = value;
    }
    return env;
  }

  private remove(row: HTMLElement): void {
    const next = (row.nextElementSibling ?? row.previousElementSibling)?.querySelector('input') ?? this.element.querySelector<HTMLButtonElement>(':scope > button');
    row.remove();
    next?.focus();
    this.onChange();
  }
}

export class PortRows {
  readonly element: HTMLElement;
  private readonly rows: HTMLElement;

  constructor(
    private readonly onChange: () => void = () => undefined,
    legend = 'Ports (optional)',
  ) {
    this.rows = h('div', { class: 'rows' });
    this.element = h(
      'fieldset',
      { class: 'row-editor', 'data-field': 'ports' },
      h('legend', {}, legend),
      this.rows,
      h('button', { type: 'button', class: 'button', onclick: () => this.add(undefined, true) }, 'Add port'),
      h('p', { class: 'field-error', hidden: true, id: uniqueId('ports-error') }),
    );
  }

  set(ports: PortMapping[]): void {
    this.rows.replaceChildren();
    for (const port of ports) this.add(port, false);
  }

  add(port: PortMapping | undefined, focus: boolean): void {
    const number = (label: string, value: number | undefined) =>
      h('input', { type: 'number', inputmode: 'numeric', min: 1, max: 65535, value, 'aria-label': label, oninput: this.onChange });
    const container = number('Container port', port?.container);
    const host = number('Host port (optional)', port?.host);
    const row: HTMLElement = h(
      'div',
      { class: 'row' },
      h('div', { class: 'port', 'data-role': 'container' }, h('span', { class: 'inline-label', 'aria-hidden': 'true' }, 'container'), container),
      h('div', { class: 'port', 'data-role': 'host' }, h('span', { class: 'inline-label', 'aria-hidden': 'true' }, 'host'), host),
      h('button', { type: 'button', class: 'button subtle', 'aria-label': 'Remove port', onclick: () => this.remove(row) }, 'Remove'),
    );
    this.rows.appendChild(row);
    if (focus) container.focus();
  }

  /** The ports entered, empty rows left out; numbers are passed on as typed for the API to judge. */
  read(): PortMapping[] {
    const ports: PortMapping[] = [];
    for (const row of this.rows.children) {
      const [containerBox, hostBox] = [...row.querySelectorAll<HTMLElement>('.port')];
      const container = containerBox!.querySelector('input')!.value.trim();
      const host = hostBox!.querySelector('input')!.value.trim();
      if (!container && !host) continue;
      containerBox!.setAttribute('data-field', `ports.${ports.length}.container`);
      hostBox!.setAttribute('data-field', `ports.${ports.length}.host`);
      ports.push({ container: Number(container || 0), ...(host ? { host: Number(host) } : {}) });
    }
    return ports;
  }

  private remove(row: HTMLElement): void {
    const next = (row.nextElementSibling ?? row.previousElementSibling)?.querySelector('input') ?? this.element.querySelector<HTMLButtonElement>(':scope > button');
    row.remove();
    next?.focus();
    this.onChange();
  }
}
