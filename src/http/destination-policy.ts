import { isIP } from 'node:net';
import { Agent } from 'undici';
import { RegistryRefused, bare, checkedLookup, portOf, refusalOf, type RegistryAllowList } from './registry-policy.js';

// The registry policy (registry-policy.ts) as the HTTP clients that reach registries and
// notification endpoints apply it. Apart from the policy itself, so that reading the allow-list
// from the flags (src/config.ts, every process) does not load undici (issue 29: idle memory).

/**
 * The policy as a client applies it to a URL: hosts the operator named go as they are; an address
 * is checked before connecting; a name connects only to the allowed addresses it resolves to.
 */
export class DestinationPolicy {
  /** For hosts the operator named: no address check. */
  private readonly named: Agent;
  /** For every other host: a name connects only to the allowed addresses it resolves to. */
  private readonly checked: Agent;

  constructor(
    readonly allowed: RegistryAllowList,
    options: Agent.Options = {},
  ) {
    this.named = new Agent(options);
    this.checked = new Agent({ ...options, connect: { ...options.connect, lookup: checkedLookup(allowed) } });
  }

  /** The dispatcher a request to `url` goes through; throws RegistryRefused when its address is not allowed. */
  dispatcherFor(url: URL): Agent {
    if (this.allowed.names(url.hostname, portOf(url))) return this.named;
    const host = bare(url.hostname);
    const refusal = isIP(host) === 0 ? undefined : refusalOf(host, this.allowed);
    if (refusal) throw new RegistryRefused(refusal);
    return this.checked;
  }

  async close(): Promise<void> {
    await Promise.all([this.named.close(), this.checked.close()]);
  }
}
