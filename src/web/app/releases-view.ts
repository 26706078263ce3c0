import { api, ApiError } from './api.js';
import type { App } from './app.js';
import { describeChanges } from './config-diff.js';
import { h, setText } from './element.js';
import { formatTime, shortDigest } from './format.js';
import type { Deployment, Release, ServiceConfig } from './model.js';
import { allowWhen } from './permissions.js';

// The releases of a service, newest first, each with what changed against the one before, and a
// Roll back button (POST /services/:name/rollback) on every release its units do not run; a release
// whose last deployment failed or was reverted says so, with why. Above them: what the next
// deploy would change against the newest release.

export class ReleasesView {
  readonly element: HTMLElement;
  private readonly list: HTMLOListElement;
  private readonly pending: HTMLElement;
  private readonly status: HTMLElement;
  private readonly error: HTMLElement;
  private releases: Release[] = [];
  /** How the newest finished deployment of each release ended, when it failed or was reverted. */
  private outcomes = new Map<number, Deployment>();
  private loadedFor = '';
  private running: number[] = [];
  private next: ServiceConfig | undefined;
  private loading: Promise<void> | undefined;
  private rendered = '';

  constructor(
    private readonly app: App,
    private readonly service: string,
  ) {
    this.pending = h('div', { class: 'pending-changes' });
    this.status = h('p', { class: 'release-status', role: 'status' });
    this.error = h('p', { class: 'form-error', role: 'alert', hidden: true });
    this.list = h('ol', { class: 'releases', 'aria-label': `Releases of ${service}` });
    this.element = h('section', { class: 'panel', 'aria-labelledby': 'releases-title' }, h('h2', { id: 'releases-title' }, 'Releases'), this.pending, this.status, this.error, this.list);
  }

  /**
   * Called on every change of the service. The history is read again when the latest deployment
   * is one the list has not seen (a new release, or its outcome).
   */
  update(next: ServiceConfig | undefined, running: number[]): void {
    this.next = next;
    this.running = running;
    const latest = this.app.state.latestDeployment(this.service);
    const marker = latest ? `${latest.id}:${latest.release}` : 'none';
    if (marker !== this.loadedFor) {
      this.loadedFor = marker;
      void this.reload();
    } else {
      this.render();
    }
  }

  private reload(): Promise<void> {
    this.loading ??= Promise.all([api('GET /services/:name/config/history', { params: { name: this.service } }), api('GET /deployments', { query: { service: this.service } })])
      .then(([releases, deployments]) => {
        this.releases = releases;
        this.outcomes = badOutcomes(deployments);
        setText(this.status, releases.length ? '' : 'No releases yet: the first deploy creates v1.');
      })
      .catch((error: unknown) => setText(this.status, `Could not read the releases: ${(error as Error).message}`))
      .finally(() => {
        this.loading = undefined;
        this.render();
      });
    return this.loading;
  }

  /** Renders only when what it shows changed, so a focused button is not replaced under the user. */
  private render(): void {
    const signature = JSON.stringify([this.releases.map((r) => r.version), [...this.outcomes.keys()], this.running, this.next]);
    if (signature === this.rendered) return;
    this.rendered = signature;
    const newest = this.releases.at(-1);
    const pending = newest && this.next ? describeChanges(newest, { digest: newest.digest, config: this.next }) : [];
    this.pending.replaceChildren(
      ...(pending.length
        ? [h('p', {}, `The next deploy changes (against v${newest!.version}):`), h('ul', { class: 'diff' }, pending.map((line) => h('li', {}, line)))]
        : []),
    );
    // Units that run a release make it current; when none runs, the newest release is.
    const current = this.running.length ? this.running : newest ? [newest.version] : [];
    const items = [...this.releases].reverse().map((release) => {
      const previous = this.releases.find((r) => r.version === release.version - 1);
      return this.item(release, previous, current);
    });
    this.list.replaceChildren(...items);
  }

  private item(release: Release, previous: Release | undefined, current: number[]): HTMLElement {
    const changes = previous ? describeChanges(previous, release) : [];
    const runs = this.running.includes(release.version);
    const bad = this.outcomes.get(release.version);
    const heading = h(
      'div',
      { class: 'release-head' },
      h('strong', {}, `v${release.version}`),
      runs ? h('span', { class: 'badge green' }, 'running') : null,
      bad ? h('span', { class: 'badge red', title: bad.reason ?? '' }, bad.state) : null,
      release.rollbackOf ? h('span', { class: 'badge' }, `rollback of v${release.rollbackOf}`) : null,
      h('span', { class: 'muted' }, `${release.tag ? `:${release.tag} ` : ''}${shortDigest(release.digest)} · ${release.config.numInstances} units · ${formatTime(release.createdAt)}`),
      current.includes(release.version) ? null : this.rollbackButton(release.version),
    );
    const body = previous
      ? changes.length
        ? h('ul', { class: 'diff', 'aria-label': `Changes in v${release.version} against v${previous.version}` }, changes.map((line) => h('li', {}, line)))
        : h('p', { class: 'muted' }, `No changes against v${previous.version}.`)
      : h('p', { class: 'muted' }, 'First release.');
    const why = bad ? h('p', { class: 'release-outcome' }, `Deployment ${bad.state}: ${bad.reason ?? 'no reason given'}`) : null;
    return h('li', { class: bad ? `release ${bad.state}` : 'release', 'data-version': release.version }, heading, why, body);
  }

  private rollbackButton(version: number): HTMLButtonElement {
    const button = h('button', { type: 'button', class: 'button', 'aria-label': `Roll back ${this.service} to v${version}`, onclick: () => void this.rollback(version, button) }, `Roll back to v${version}`);
    allowWhen(button, this.app.refusal('deploy', this.service));
    return button;
  }

  private async rollback(version: number, button: HTMLButtonElement): Promise<void> {
    this.error.hidden = true;
    button.setAttribute('aria-disabled', 'true');
    setText(this.status, `Rolling back to v${version}…`);
    try {
      const reply = await api('POST /services/:name/rollback', { params: { name: this.service }, body: { version } });
      setText(this.status, `Rolling back to v${version} as ${reply.release}.`);
    } catch (error) {
      setText(this.status, '');
      this.error.textContent = `Roll back to v${version} failed: ${error instanceof ApiError ? error.message : String(error)}`;
      this.error.hidden = false;
    } finally {
      button.removeAttribute('aria-disabled');
    }
  }
}

/**
 * The releases whose newest finished deployment (a stop aside) failed or was reverted: a release
 * deployed again later and succeeding is not marked. Deployments come newest first.
 */
export function badOutcomes(deployments: readonly Deployment[]): Map<number, Deployment> {
  const settled = new Set<number>();
  const bad = new Map<number, Deployment>();
  for (const deployment of deployments) {
    if (deployment.trigger === 'stop' || settled.has(deployment.release)) continue;
    if (!['succeeded', 'failed', 'reverted'].includes(deployment.state)) continue;
    settled.add(deployment.release);
    if (deployment.state !== 'succeeded') bad.set(deployment.release, deployment);
  }
  return bad;
}
