import type { Store } from '../../../store/store.js';
import { componentPrefix, components as componentNames, lastSegment, servicePrefix, type Component } from '../../../store/keys.js';
import { PrefixCache, decodeCached } from '../../../store/prefix-cache.js';
import type { Domains } from '../../../http/host-name.js';
import { planRoutes, type AnnouncedComponent, type RoutedService } from '../route-plan.js';

// The names HTTPS is for: `<service>.<domain>` of public-facing load-balanced services, and the
// components' public names when they are exposed. They follow the routing rules (route-plan.ts),
// minus the internal domain: an internal-only service never gets a public certificate, and a TLS
// handshake for any other name is refused.

/**
 * Pure: the public names of the routes the gateway plans for these declarations and component
 * announcements (pass none to leave components out). `platform cert list` says by the same rule
 * which of them a certificate serves.
 */
export function publicHostNames(services: readonly RoutedService[], components: readonly AnnouncedComponent[], domains: Domains): string[] {
  // The zone after the first label, not a suffix: the internal domain may lie under the public one.
  const isPublic = (host: string) => host.slice(host.indexOf('.') + 1) === domains.domain;
  return planRoutes(services, [], components, domains).flatMap((route) => route.hosts.filter(isPublic));
}

export class PublicHosts {
  private hosts = new Set<string>();
  private readonly listeners: (() => void)[] = [];

  private constructor(
    private readonly services: PrefixCache,
    private readonly components: PrefixCache | undefined,
    private readonly domains: Domains,
  ) {}

  static async start(store: Store, domains: Domains, exposeComponents: boolean): Promise<PublicHosts> {
    const services = await PrefixCache.start(store, servicePrefix);
    const components = exposeComponents ? await PrefixCache.start(store, componentPrefix).catch(async (error: unknown) => {
      await services.close();
      throw error;
    }) : undefined;
    const hosts = new PublicHosts(services, components, domains);
    hosts.rebuild();
    services.onChange(() => hosts.rebuild());
    components?.onChange(() => hosts.rebuild());
    return hosts;
  }

  has(host: string): boolean {
    return this.hosts.has(host);
  }

  all(): string[] {
    return [...this.hosts].sort();
  }

  onChange(listener: () => void): void {
    this.listeners.push(listener);
  }

  async close(): Promise<void> {
    await Promise.all([this.services.close(), this.components?.close()]);
  }

  private rebuild(): void {
    let services: RoutedService[];
    let components: AnnouncedComponent[];
    try {
      services = this.services.values().flatMap((entry) => {
        try {
          return [decodeCached<RoutedService>(entry)];
        } catch {
          return []; // not JSON: not a declaration routing can use
        }
      });
      components = (this.components?.values() ?? [])
        .map((entry) => ({ component: lastSegment(entry.key) as Component, address: entry.value }))
        .filter((entry) => componentNames.includes(entry.component));
    } catch {
      return; // the store does not answer: keep the last names
    }
    const hosts = new Set(publicHostNames(services, components, this.domains));
    const changed = hosts.size !== this.hosts.size || [...hosts].some((host) => !this.hosts.has(host));
    this.hosts = hosts;
    if (changed) for (const listener of this.listeners) listener();
  }
}
