import { h, uniqueId } from './element.js';

// The API's 400 messages start with the field they are about ("numInstances must be…",
// "ports.0.container must be…") and a duplicate says "service X already exists". The message is
// shown beside that field, found by its data-field attribute, or on the form when none matches.

export function fieldOf(message: string): string | undefined {
  if (/^service \S+ already exists/.test(message)) return 'name';
  return /^([A-Za-z_][\w]*(?:\.[\w-]+)*) /.exec(message)?.[1];
}

export function clearErrors(form: HTMLElement): void {
  for (const slot of form.querySelectorAll<HTMLElement>('.field-error')) {
    slot.textContent = '';
    slot.hidden = true;
  }
  for (const input of form.querySelectorAll('[aria-invalid]')) input.removeAttribute('aria-invalid');
}

/** Shows `message` next to its field (and focuses it), or in `fallback`. */
export function showError(form: HTMLElement, message: string, fallback: HTMLElement): void {
  clearErrors(form);
  const target = fieldElement(form, fieldOf(message));
  if (!target) {
    fallback.textContent = message;
    fallback.hidden = false;
    return;
  }
  let slot = target.querySelector<HTMLElement>(':scope > .field-error');
  if (!slot) slot = target.appendChild(h('p', { class: 'field-error', id: uniqueId('error') }));
  slot.textContent = message;
  slot.hidden = false;
  const input = target.querySelector<HTMLInputElement>('input, textarea, select');
  if (input) {
    input.setAttribute('aria-invalid', 'true');
    const described = new Set((input.getAttribute('aria-describedby') ?? '').split(' ').filter(Boolean));
    described.add(slot.id);
    input.setAttribute('aria-describedby', [...described].join(' '));
    input.focus();
  }
}

/** The element for `ports.0.container`, else `ports.0`, else `ports`. */
function fieldElement(form: HTMLElement, field: string | undefined): HTMLElement | undefined {
  for (let name = field; name; name = name.includes('.') ? name.slice(0, name.lastIndexOf('.')) : undefined) {
    const found = form.querySelector<HTMLElement>(`[data-field="${CSS.escape(name)}"]`);
    if (found) return found;
  }
  return undefined;
}

/** A labelled input with its error slot: `<div data-field><label/><input/><p class=field-error/></div>`. */
export function field(name: string, label: string, input: HTMLInputElement | HTMLTextAreaElement | HTMLSelectElement, hint?: string): HTMLElement {
  const id = input.id || uniqueId(`field-${name}`);
  input.id = id;
  const hintElement = hint ? h('p', { class: 'hint', id: `${id}-hint` }, hint) : undefined;
  if (hintElement) input.setAttribute('aria-describedby', hintElement.id);
  return h('div', { class: 'field', 'data-field': name }, h('label', { for: id }, label), input, hintElement, h('p', { class: 'field-error', id: `${id}-error`, hidden: true }));
}
