import { isIP } from 'node:net';
import type { Agent } from 'undici';
import { RegistryRefused, bare, checkedLookup, portOf, refusalOf, type RegistryAllowList } from './registry-policy.js';

// The registry policy (registry-policy.ts) as the HTTP clients that reach registries and
// notification endpoints apply it. Apart from the policy itself, so that reading the allow-list
// from the flags (src/config.ts, every process) does not load undici (issue 29: idle memory); and
// undici is loaded with the first request, not when a scheduler starts (its hundred modules were
// some 5 MiB of an idle scheduler's memory).

/**
 * The policy as a client applies it to a URL: hosts the operator named go as they are; an address
 * is checked before connecting; a name connects only to the allowed addresses it resolves to.
 */
export class DestinationPolicy {
  /**
   * `named`, for hosts the operator named: no address check; `checked`, for every other host: a
   * name connects only to the allowed addresses it resolves to. Made with the first request.
   */
  private agents?: Promise<{ named: Agent; checked: Agent }>;

  constructor(
    readonly allowed: RegistryAllowList,
    private readonly options: Agent.Options = {},
  ) {}

  /** The dispatcher a request to `url` goes through; rejects with RegistryRefused when its address is not allowed. */
  async dispatcherFor(url: URL): Promise<Agent> {
    const named = this.allowed.names(url.hostname, portOf(url));
    if (!named) {
      const host = bare(url.hostname);
      const refusal = isIP(host) === 0 ? undefined : refusalOf(host, this.allowed);
      if (refusal) throw new RegistryRefused(refusal);
    }
    const agents = await (this.agents ??= this.createAgents());
    return named ? agents.named : agents.checked;
  }

  private async createAgents(): Promise<{ named: Agent; checked: Agent }> {
    const { Agent } = await import('undici');
    return { named: new Agent(this.options), checked: new Agent({ ...this.options, connect: { ...this.options.connect, lookup: checkedLookup(this.allowed) } }) };
  }

  async close(): Promise<void> {
    if (!this.agents) return;
    const { named, checked } = await this.agents;
    await Promise.all([named.close(), checked.close()]);
  }
}
