import { hostname, networkInterfaces } from 'node:os';
import { isLoopback } from '../../auth/caller.js';
import type { GatewayConfig } from '../../config.js';
import type { Domains } from '../../http/host-name.js';

// Internal stays internal. On a loopback listener (the default, and `npm start`) the gateway
// serves both domains and its own endpoints for any host that is not a service host, as always.
// On any other address the public listener routes only the public domain (an internal host gets
// the unknown host's 404) and answers its own endpoints only for its own address; the internal
// domain is served on a listener of its own (--internal-host, --internal-port), which an operator
// binds to the cluster's private network.

export interface ListenerPolicy {
  /** Whether `<service>.<internal-domain>` is routed here. */
  internalDomain: boolean;
  /** Hosts the gateway's own endpoints answer; undefined: any host that is not a service host. */
  ownHosts?: ReadonlySet<string>;
}

export const openPolicy: ListenerPolicy = { internalDomain: true };

export interface Listener {
  host: string;
  port: number;
}

export interface GatewayListeners {
  public: Listener & { policy: ListenerPolicy };
  /** Only when the public listener is not on loopback. */
  internal?: Listener;
}

/** The header HAProxy sets (and strips from clients) so the Node server behind it knows the listener. */
export const LISTENER_HEADER = 'x-platform-gateway-listener';

/** Whether the listener routes `host` (lower case, no port). */
export const routesHost = (policy: ListenerPolicy, host: string, domains: Domains): boolean =>
  policy.internalDomain || !host.endsWith(`.${domains.internalDomain}`);

/** Whether the listener answers the gateway's own endpoints for `host`. */
export const answersOwn = (policy: ListenerPolicy, host: string): boolean => policy.ownHosts === undefined || policy.ownHosts.has(host);

const bracketed = (address: string): string => (address.includes(':') ? `[${address}]` : address);

const hostName = (name: string): string => bracketed(name.replace(/^\[|\]$/g, '')).toLowerCase();

/** Every address of the machine's interfaces, as hosts are written in `host:port` (IPv6 in brackets). */
const interfaceAddresses = (): string[] => Object.values(networkInterfaces()).flatMap((addresses) => (addresses ?? []).map(({ address }) => hostName(address)));

/** The gateway's own names: its listen and advertised hosts, and every address of the machine when it listens on all. */
export function ownHostNames(listenHost: string, advertiseHost: string): Set<string> {
  const names = new Set([listenHost, advertiseHost].map(hostName));
  if (listenHost === '0.0.0.0' || listenHost === '::') for (const address of interfaceAddresses()) names.add(address);
  return names;
}

/** Every name of this machine a unit could be announced at: its advertised host, its host name and its interfaces' addresses. */
export const machineHostNames = (advertiseHost: string): Set<string> => new Set([hostName(advertiseHost), hostName(hostname()), ...interfaceAddresses()]);

export function gatewayListeners(host: string, port: number, settings: GatewayConfig, advertiseHost: string): GatewayListeners {
  if (isLoopback(host) || host === 'localhost') return { public: { host, port, policy: openPolicy } };
  return {
    public: { host, port, policy: { internalDomain: false, ownHosts: ownHostNames(host, advertiseHost) } },
    internal: { host: settings.internalHost, port: settings.internalPort ?? port + 1 },
  };
}
