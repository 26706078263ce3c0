import { api, ApiError } from './api.js';
import { h } from './element.js';
import { clearErrors, field, showError } from './field-errors.js';
import { EnvRows, PortRows } from './row-editors.js';

// "New service": the specification's form (name, description, container repository, number of
// units, ports and environment variables, both optional) plus publicFacing and loadBalanced.
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

  private reset(): void {
    this.form.reset();
    this.env.set({});
    this.ports.set([]);
  }
}
