import { api, ApiError } from './api.js';
import { h } from './element.js';
import { clearErrors, field, showError } from './field-errors.js';
import { EnvRows, PortRows } from './row-editors.js';

// "New service": the specification's form (name, description, container repository, number of
// units, ports and environment variables, both optional) plus publicFacing and loadBalanced, and
// what each unit reserves (memory, CPUs), how units are placed, and their volumes (all optional).
// Nothing is checked here: the API's 400 and 409 messages are shown beside their fields.

export class CreateServiceDialog {
  readonly element: HTMLDialogElement;
  private readonly form: HTMLFormElement;
  private readonly formError: HTMLElement;
  private readonly submit: HTMLButtonElement;
  private readonly env = new EnvRows();
  private readonly ports = new PortRows();
  private readonly inputs = {
    name: h('input', { name: 'name', autocomplete: 'off', spellcheck: 'false', autocapitalize: 'none' }),
    description: h('input', { name: 'description', autocomplete: 'off' }),
    containerRepository: h('input', { name: 'containerRepository', autocomplete: 'off', spellcheck: 'false', placeholder: 'registry.example:5000/team/web' }),
    numInstances: h('input', { name: 'numInstances', type: 'number', inputmode: 'numeric', min: 0, max: 1000, value: 1 }),
    publicFacing: h('input', { name: 'publicFacing', type: 'checkbox' }),
    loadBalanced: h('input', { name: 'loadBalanced', type: 'checkbox', checked: true }),
    memoryMB: h('input', { name: 'memoryMB', type: 'number', inputmode: 'numeric', min: 6, placeholder: 'no limit' }),
    cpus: h('input', { name: 'cpus', type: 'number', inputmode: 'decimal', min: 0.01, step: 0.01, placeholder: 'no limit' }),
    placement: h('select', { name: 'placement' }, h('option', { value: 'spread' }, 'Spread: the least used machine'), h('option', { value: 'binpack' }, 'Binpack: fill one machine first')),
    volumes: h('input', { name: 'volumes', autocomplete: 'off', spellcheck: 'false', placeholder: 'data:/var/lib/data' }),
  };

  constructor(private readonly created: (name: string) => void) {
    const { inputs } = this;
    this.formError = h('p', { class: 'form-error', role: 'alert', hidden: true });
    this.submit = h('button', { type: 'submit', class: 'button primary' }, 'Create service');
    this.form = h(
      'form',
      { novalidate: true, class: 'stack', onsubmit: (event: Event) => void this.save(event) },
      h('h2', { id: 'new-service-title' }, 'New service'),
      field('name', 'Name', inputs.name, 'Lowercase letters, digits and "-"; it becomes the host name <name>.<domain>.'),
      field('description', 'Description', inputs.description),
      field('containerRepository', 'Container repository', inputs.containerRepository, 'Where the image is pushed, optionally with :tag.'),
      field('numInstances', 'Number of units', inputs.numInstances),
      this.ports.element,
      this.env.element,
      field('resources.memoryMB', 'Memory per unit (MB)', inputs.memoryMB, 'Reserved on its machine and the limit of its container (no swap beyond it).'),
      field('resources.cpus', 'CPUs per unit', inputs.cpus, 'Reserved on its machine and the limit of its container, e.g. 0.5.'),
      field('placement', 'Placement', inputs.placement),
      field('volumes', 'Volumes', inputs.volumes, 'name:/path, comma-separated. Each unit keeps its own volume on its machine.'),
      h(
        'div',
        { class: 'checks' },
        h('div', { class: 'field check', 'data-field': 'publicFacing' }, h('label', {}, inputs.publicFacing, ' Public facing')),
        h('div', { class: 'field check', 'data-field': 'loadBalanced' }, h('label', {}, inputs.loadBalanced, ' Load balanced')),
      ),
      this.formError,
      h('div', { class: 'actions' }, h('button', { type: 'button', class: 'button', onclick: () => this.close() }, 'Cancel'), this.submit),
    );
    this.element = h('dialog', { class: 'dialog', 'aria-labelledby': 'new-service-title' }, this.form);
  }

  open(): void {
    clearErrors(this.form);
    this.formError.hidden = true;
    this.element.showModal();
    this.inputs.name.focus();
  }

  close(): void {
    this.element.close();
  }

  private async save(event: Event): Promise<void> {
    event.preventDefault();
    if (this.submit.getAttribute('aria-disabled')) return;
    clearErrors(this.form);
    this.formError.hidden = true;
    const { inputs } = this;
    const ports = this.ports.read();
    const env = this.env.read();
    const body = {
      name: inputs.name.value.trim(),
      description: inputs.description.value,
      containerRepository: inputs.containerRepository.value.trim(),
      numInstances: inputs.numInstances.value.trim() === '' ? 1 : Number(inputs.numInstances.value),
      publicFacing: inputs.publicFacing.checked,
      loadBalanced: inputs.loadBalanced.checked,
      ...(ports.length ? { ports } : {}),
      ...(Object.keys(env).length ? { env } : {}),
      ...this.unitShape(),
    };
    this.submit.setAttribute('aria-disabled', 'true');
    this.submit.textContent = 'Creating…';
    try {
      await api('POST /services', { body });
      this.reset();
      this.close();
      this.created(body.name);
    } catch (error) {
      showError(this.form, error instanceof ApiError ? error.message : String(error), this.formError);
    } finally {
      this.submit.removeAttribute('aria-disabled');
      this.submit.textContent = 'Create service';
    }
  }

  /** Resources, placement and volumes, when set (the API checks them and names the field). */
  private unitShape() {
    const { memoryMB, cpus, placement, volumes } = this.inputs;
    const resources = {
      ...(memoryMB.value.trim() ? { memoryMB: Number(memoryMB.value) } : {}),
      ...(cpus.value.trim() ? { cpus: Number(cpus.value) } : {}),
    };
    const declared = volumes.value
      .split(',')
      .map((entry) => entry.trim())
      .filter(Boolean)
      .map((entry) => {
        const at = entry.indexOf(':');
        return at < 0 ? { name: entry, path: '' } : { name: entry.slice(0, at), path: entry.slice(at + 1) };
      });
    return {
      ...(Object.keys(resources).length ? { resources } : {}),
      ...(placement.value === 'binpack' ? { placement: 'binpack' as const } : {}),
      ...(declared.length ? { volumes: declared } : {}),
    };
  }

  private reset(): void {
    this.form.reset();
    this.env.set({});
    this.ports.set([]);
  }
}
