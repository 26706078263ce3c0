import { pageRequest, sessionHeaders } from './api.js';
import { h, setText } from './element.js';

// The log tail of one unit: GET /services/:name/units/:unit/logs?tail=100&follow=true, a text
// stream read as it arrives. Only the last ~200 kB are kept on the page. "Previous (failed)" shows
// instead the output kept of the unit's newest failed container (`previous=true`), "Live" goes back.

const KEEP_CHARS = 200_000;

export class LogTail {
  readonly element: HTMLElement;
  private readonly heading: HTMLElement;
  private readonly output: HTMLPreElement;
  private readonly status: HTMLElement;
  private controller: AbortController | undefined;
  private unit: string | undefined;

  constructor(private readonly service: string) {
    this.heading = h('h2', { id: 'log-title' }, 'Logs');
    this.output = h('pre', { class: 'log', tabindex: 0, 'aria-labelledby': 'log-title' });
    this.status = h('p', { class: 'muted', role: 'status' });
    this.element = h(
      'section',
      { class: 'panel log-panel', 'aria-labelledby': 'log-title', hidden: true },
      h(
        'div',
        { class: 'panel-head' },
        this.heading,
        h('button', { type: 'button', class: 'button', onclick: () => this.unit && this.open(this.unit) }, 'Live'),
        h('button', { type: 'button', class: 'button', onclick: () => this.showPrevious() }, 'Previous (failed)'),
        h('button', { type: 'button', class: 'button', onclick: () => this.close() }, 'Close logs'),
      ),
      this.status,
      this.output,
    );
  }

  open(unit: string): void {
    this.stop();
    this.unit = unit;
    this.element.hidden = false;
    setText(this.heading, `Logs of ${unit}`);
    this.output.textContent = '';
    setText(this.status, 'Connecting…');
    const controller = new AbortController();
    this.controller = controller;
    void this.follow(unit, controller.signal);
    this.output.focus();
  }

  close(): void {
    this.stop();
    this.element.hidden = true;
  }

  stop(): void {
    this.controller?.abort();
    this.controller = undefined;
  }

  /** The output kept of the open unit's newest failed container, or why there is none. */
  private async showPrevious(): Promise<void> {
    const unit = this.unit;
    if (!unit) return;
    this.stop();
    setText(this.heading, `Logs of ${unit}: previous (failed) run`);
    this.output.textContent = '';
    setText(this.status, 'Reading…');
    const { url } = pageRequest('GET /services/:name/units/:unit/logs', { params: { name: this.service, unit }, query: { tail: 100, previous: true } });
    try {
      const response = await fetch(url, { headers: sessionHeaders() });
      if (!response.ok) {
        const body = (await response.json().catch(() => ({}))) as { message?: string };
        setText(this.status, body.message ?? response.statusText);
        return;
      }
      this.output.textContent = await response.text();
      setText(this.status, 'The last output of its newest failed container, kept after the container was gone.');
    } catch (error) {
      setText(this.status, `Could not read the previous output: ${(error as Error).message}`);
    }
  }

  private async follow(unit: string, signal: AbortSignal): Promise<void> {
    try {
      const { url } = pageRequest('GET /services/:name/units/:unit/logs', { params: { name: this.service, unit }, query: { tail: 100, follow: true } });
      const response = await fetch(url, { signal, headers: sessionHeaders() });
      if (!response.ok || !response.body) {
        const body = (await response.json().catch(() => ({}))) as { message?: string };
        setText(this.status, `Could not read the logs: ${body.message ?? response.statusText}`);
        return;
      }
      setText(this.status, 'Following (newest at the bottom).');
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        this.append(value);
      }
      setText(this.status, 'The log stream ended (the unit stopped or was replaced).');
    } catch (error) {
      if (!signal.aborted) setText(this.status, `The log stream broke: ${(error as Error).message}`);
    }
  }

  private append(text: string): void {
    const atBottom = this.output.scrollTop + this.output.clientHeight >= this.output.scrollHeight - 8;
    const content = (this.output.textContent ?? '') + text;
    this.output.textContent = content.length > KEEP_CHARS ? content.slice(content.length - KEEP_CHARS) : content;
    if (atBottom) this.output.scrollTop = this.output.scrollHeight;
  }
}
