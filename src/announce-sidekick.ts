import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { LeasedKeys } from './store/leased-keys.js';
import type { Component } from './store/keys.js';
import { announcementEntry } from './store/records/announcements.js';
import type { Store, Watch } from './store/store.js';

// `platform announce`, the `<component>-announce.service` sidekick of fleet and Paz: it keeps
// `/platform/services/<component>` = host:port under its own TTL lease only while the component
// answers at that address, so peers never find a component that is hung or gone.
//
// Withdrawing revokes the sidekick's lease rather than deleting the key: when another instance of
// the component has announced itself since, the key is under that instance's lease and stays.
// When the key disappears (the instance that held it went away) a sidekick whose component is
// healthy writes it again, so one live instance takes over.

export interface SidekickOptions {
  component: Component;
  /** host:port the component is announced at, and probed at. */
  address: string;
  ttlSeconds: number;
  /** Time between probes; one probe may take as long. */
  checkIntervalMs: number;
  log: Logger;
}

/** Consecutive failed probes before the key is withdrawn: one lost probe on a busy machine is not an outage. */
export const FAILED_PROBES_TO_WITHDRAW = 2;

/** The role name a component's /healthz answers with (`role` in its body). */
const roleOf: Record<Component, string> = {
  'service-directory': 'directory',
  scheduler: 'scheduler',
  orchestrator: 'orchestrator',
  gateway: 'gateway',
  web: 'web',
};

export type Probe = { healthy: true } | { healthy: false; reason: string };

/**
 * Whether the component answers at `address`, on /healthz. The scheduler's says whether it leads:
 * only the leader is announced, as when schedulers announce themselves. Not /readyz: the units
 * run with --auth token, and /readyz tells a caller without a token (the sidekick) only its status,
 * so a scheduler probed there was never announced and no orchestrator became ready (issue 30 item 3).
 */
export async function probeComponent(component: Component, address: string, timeoutMs: number): Promise<Probe> {
  const path = '/healthz';
  let body: { role?: unknown; leader?: unknown };
  try {
    const response = await fetch(`http://${address}${path}`, { signal: AbortSignal.timeout(timeoutMs) });
    if (!response.ok) return { healthy: false, reason: `${path} answered ${response.status}` };
    body = (await response.json()) as typeof body;
  } catch (error) {
    const cause = (error as { cause?: { code?: string } }).cause?.code;
    return { healthy: false, reason: `${path} did not answer: ${cause ?? (error as Error).message}` };
  }
  if (body.role !== roleOf[component]) return { healthy: false, reason: `${address} is not the ${roleOf[component]} role (it says role ${String(body.role)})` };
  if (component === 'scheduler' && body.leader !== true) return { healthy: false, reason: 'this scheduler does not lead' };
  return { healthy: true };
}

export class AnnounceSidekick {
  private readonly key: string;
  private keys: LeasedKeys | undefined;
  private watch: Watch | undefined;
  private failures = 0;
  private readonly stopped = new AbortController();
  private loop: Promise<void> | undefined;

  constructor(
    private readonly store: Store,
    private readonly options: SidekickOptions,
  ) {
    this.key = announcementEntry(options.component, options.address).key;
  }

  async start(): Promise<void> {
    this.watch = await this.store.watchPrefix(this.key, (event) => {
      // Another instance's key went away (or ours was lost with etcd's data): take over if we may.
      if (event.key === this.key && event.type === 'delete' && this.keys) void this.keys.set(this.key, this.options.address).catch(() => undefined);
    });
    this.loop = this.run();
  }

  /** Stops probing and revokes the lease: the key is gone at once if it is still ours. */
  async close(): Promise<void> {
    this.stopped.abort();
    await this.loop;
    await this.watch?.close();
    await this.withdraw('the sidekick stops');
  }

  private async run(): Promise<void> {
    const { signal } = this.stopped;
    while (!signal.aborted) {
      const started = Date.now();
      const probe = await probeComponent(this.options.component, this.options.address, this.options.checkIntervalMs);
      if (signal.aborted) return;
      await this.apply(probe);
      await sleep(Math.max(0, this.options.checkIntervalMs - (Date.now() - started)), undefined, { signal }).catch(() => undefined);
    }
  }

  private async apply(probe: Probe): Promise<void> {
    if (probe.healthy) {
      this.failures = 0;
      if (!this.keys) await this.announce();
      return;
    }
    this.failures += 1;
    if (this.keys && this.failures >= FAILED_PROBES_TO_WITHDRAW) await this.withdraw(probe.reason);
    else if (!this.keys && this.failures === 1) this.options.log.info({ component: this.options.component, reason: probe.reason }, 'not announcing yet');
  }

  private async announce(): Promise<void> {
    this.keys = await LeasedKeys.start(this.store, this.options.ttlSeconds, this.options.log);
    await this.keys.set(this.key, this.options.address);
    this.options.log.info({ key: this.key, address: this.options.address }, 'announced');
  }

  private async withdraw(reason: string): Promise<void> {
    const keys = this.keys;
    if (!keys) return;
    this.keys = undefined;
    await keys.close();
    this.options.log.warn({ key: this.key, address: this.options.address, reason }, 'withdrawn');
  }
}
