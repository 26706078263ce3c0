import { api, ApiError, keepSessionProof } from './api.js';
import type { View } from './app.js';
import { h } from './element.js';
import { field, showError } from './field-errors.js';

// The sign-in page, shown instead of the dashboard when the API wants a token and the page has no
// session: a token is exchanged for the session cookie and its proof (POST /session), then the page
// starts again as that token. The token itself is never kept by the page.

export class SignInView implements View {
  readonly element: HTMLElement;
  readonly title = 'Sign in';
  private readonly form: HTMLFormElement;
  private readonly input: HTMLInputElement;
  private readonly formError: HTMLElement;
  private readonly submit: HTMLButtonElement;

  constructor(reason: string) {
    this.input = h('input', { name: 'token', type: 'password', autocomplete: 'off', spellcheck: 'false', autocapitalize: 'none', required: true });
    this.formError = h('p', { class: 'form-error', role: 'alert', hidden: true });
    this.submit = h('button', { type: 'submit', class: 'button primary' }, 'Sign in');
    this.form = h(
      'form',
      { class: 'stack', novalidate: true, 'aria-labelledby': 'sign-in-title', onsubmit: (event: Event) => void this.signIn(event) },
      h('h1', { id: 'sign-in-title', tabindex: -1 }, 'Sign in'),
      h('p', { class: 'lead' }, reason),
      field('token', 'Access token', this.input, 'A token from platform token create, or the admin token platform up wrote to its data directory. It is exchanged for a session of at most 12 hours and not kept by the page.'),
      this.formError,
      h('div', { class: 'actions' }, this.submit),
    );
    this.element = h('section', { class: 'view sign-in panel' }, this.form);
  }

  update(): void {
    this.input.focus();
  }

  private async signIn(event: Event): Promise<void> {
    event.preventDefault();
    this.formError.hidden = true;
    this.submit.setAttribute('aria-disabled', 'true');
    try {
      const started = await api('POST /session', { body: { token: this.input.value.trim() } });
      keepSessionProof(started.proof);
      this.input.value = '';
      location.reload();
    } catch (error) {
      showError(this.form, error instanceof ApiError ? error.message : String(error), this.formError);
    } finally {
      this.submit.removeAttribute('aria-disabled');
    }
  }
}
