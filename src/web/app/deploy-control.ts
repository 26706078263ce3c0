import { api, ApiError } from './api.js';
import type { App } from './app.js';
import { h, setAttribute, setText } from './element.js';
import { formatTime } from './format.js';
import { isFinished, isRunning, type Deployment } from './model.js';
import { allowWhen } from './permissions.js';

// The Deploy button of a service and what its latest deployment is doing: progress while it
// rolls (from deployment events, or polled while the stream is down), then its outcome. On the
// service page a tag picker beside it lists the repository's tags (GET /services/:name/tags: the
// scheduler asks the registry, with its stored login); left at "running tag" Deploy deploys what
// the service runs now, as the CLI's `platform deploy NAME` does.

const POLL_MS = 2000;

export class DeployControl {
  readonly element: HTMLElement;
  private readonly button: HTMLButtonElement;
  private readonly status: HTMLElement;
  private readonly progress: HTMLProgressElement;
  private requesting = false;
  private error: { message: string; latestId: string | undefined } | undefined;
  /** What the API said when a deploy started nothing new (the same image and config already run). */
  private notice: { message: string; latestId: string | undefined } | undefined;
  private pollTimer: number | undefined;
  private readonly tagPicker: HTMLSelectElement | undefined;
  /** `registry/repository` of the listed tags. */
  private repository = '';

  constructor(
    private readonly app: App,
    readonly service: string,
    options: { pickTag?: boolean } = {},
  ) {
    this.button = h('button', { type: 'button', class: 'button primary', 'aria-label': `Deploy ${service}`, onclick: () => void this.deploy() }, 'Deploy');
    this.progress = h('progress', { class: 'deploy-progress', 'aria-label': `Deploy progress of ${service}`, hidden: true });
    this.status = h('span', { class: 'deploy-status', role: 'status' });
    if (options.pickTag) {
      this.tagPicker = h('select', { class: 'tag-picker', 'aria-label': `Tag to deploy of ${service}` }, h('option', { value: '' }, 'running tag'));
      void this.loadTags(this.tagPicker);
    }
    this.element = h('div', { class: 'deploy' }, this.tagPicker, this.button, this.progress, this.status);
    this.update();
  }

  private async loadTags(picker: HTMLSelectElement): Promise<void> {
    try {
      const { repository, tags } = await api('GET /services/:name/tags', { params: { name: this.service } });
      this.repository = repository;
      picker.append(...tags.map((tag) => h('option', { value: tag }, tag)));
      picker.title = `Tags of ${repository}`;
    } catch (error) {
      picker.append(h('option', { value: '', disabled: true }, 'no tags listed'));
      picker.title = `The registry's tags could not be listed: ${error instanceof ApiError ? error.message : String(error)}`;
    }
  }

  update(): void {
    const latest = this.app.state.latestDeployment(this.service);
    if (this.error && latest?.id !== this.error.latestId) this.error = undefined;
    if (this.notice && latest?.id !== this.notice.latestId) this.notice = undefined;
    const rolling = latest !== undefined && !isFinished(latest);
    const busy = this.requesting || rolling;
    setAttribute(this.button, 'aria-disabled', busy ? 'true' : undefined);
    allowWhen(this.button, this.app.refusal('deploy', this.service));
    setText(this.button, busy ? 'Deploying…' : 'Deploy');
    this.element.classList.toggle('failed', Boolean(this.error) || latest?.state === 'failed');
    this.progress.hidden = !rolling || !latest || latest.units.length === 0;
    if (rolling && latest && latest.units.length > 0) {
      this.progress.max = latest.units.length;
      this.progress.value = latest.units.filter(isRunning).length;
    }
    setText(this.status, this.error ? `Deploy failed: ${this.error.message}` : this.requesting ? 'Starting deploy…' : (this.notice?.message ?? describe(latest)));
    this.status.title = latest ? `deployment ${latest.id} (${latest.trigger}), started ${formatTime(latest.createdAt)}` : '';
    if (rolling && !this.app.isLive()) this.poll(latest);
  }

  dispose(): void {
    clearTimeout(this.pollTimer);
  }

  private async deploy(): Promise<void> {
    const latest = this.app.state.latestDeployment(this.service);
    if (this.requesting || (latest && !isFinished(latest))) return;
    this.requesting = true;
    this.error = undefined;
    this.notice = undefined;
    this.update();
    try {
      const tag = this.tagPicker?.value ?? '';
      const body = tag === '' ? {} : { containerRepository: `${this.repository}:${tag}` };
      const reply = await api('POST /services/:name/deploy', { params: { name: this.service }, body });
      await this.fetchDeployment(reply.deployment);
      const current = this.app.state.latestDeployment(this.service);
      if (reply.outcome && reply.outcome !== 'created') this.notice = { message: reply.message, latestId: current?.id };
    } catch (error) {
      this.error = { message: error instanceof ApiError ? error.message : String(error), latestId: latest?.id };
    } finally {
      this.requesting = false;
      this.update();
    }
  }

  /** The event for a new deployment may come after the reply: read it once so progress shows at once. */
  private async fetchDeployment(id: string): Promise<void> {
    if (this.app.state.deployments.has(id)) return;
    const deployment = await api('GET /deployments/:id', { params: { id } }).catch(() => undefined);
    if (deployment && !this.app.state.deployments.has(id)) {
      this.app.state.applyDeployment({ key: id, value: deployment });
      this.app.requestRender();
    }
  }

  private poll(deployment: Deployment): void {
    if (this.pollTimer !== undefined) return;
    this.pollTimer = window.setTimeout(async () => {
      const fresh = await api('GET /deployments/:id', { params: { id: deployment.id } }).catch(() => undefined);
      this.pollTimer = undefined;
      if (fresh && !this.app.isLive()) {
        this.app.state.applyDeployment({ key: fresh.id, value: fresh });
        this.app.requestRender();
      }
    }, POLL_MS);
  }
}

function describe(deployment: Deployment | undefined): string {
  if (!deployment) return 'not deployed yet';
  const v = `v${deployment.release}`;
  const ready = deployment.units.filter(isRunning).length;
  switch (deployment.state) {
    case 'pending':
      return `Deploying ${v}: waiting to start`;
    case 'pulling':
      return `Deploying ${v}: pulling the image`;
    case 'rolling':
      return `Deploying ${v}: ${ready} of ${deployment.units.length} units ready`;
    case 'succeeded':
      if (deployment.trigger === 'stop') return `units stopped at ${formatTime(deployment.finishedAt ?? deployment.updatedAt)}; not deployed since`;
      return `${v} deployed at ${formatTime(deployment.finishedAt ?? deployment.updatedAt)}`;
    case 'failed':
      return `${v} failed: ${deployment.reason ?? 'no reason given'}`;
    case 'reverted':
      return `${v} reverted: ${deployment.reason ?? 'it failed'}`;
    case 'superseded':
      return `${v} superseded by a newer deploy`;
    default:
      return `${v}: ${deployment.state}`;
  }
}
