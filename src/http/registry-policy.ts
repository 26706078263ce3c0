import { BlockList, isIP } from 'node:net';
import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from 'node:dns';

// Which hosts the scheduler's registry client may contact. A declaration names its registry, so
// without a rule anyone who may declare a service could make the scheduler call into the network
// it runs in (etcd, cloud metadata, admin pages) and read the answers back through the token
// exchange. Public addresses are allowed; loopback, private, shared (CGNAT), link-local,
// unspecified and other special addresses only when the operator names the registry
// (--allowed-registry). A host name is checked by the addresses it resolves to, at connect time,
// so the address checked is the address connected to (a name that re-resolves cannot slip by).
// The same rule guards the scheduler's notification deliveries (--allowed-notification-destination):
// DestinationPolicy is how both clients apply it.

const specialRanges: [kind: string, network: string, prefix: number][] = [
  ['unspecified', '0.0.0.0', 8],
  ['loopback', '127.0.0.0', 8],
  ['private', '10.0.0.0', 8],
  ['private', '172.16.0.0', 12],
  ['private', '192.168.0.0', 16],
  ['shared (CGNAT)', '100.64.0.0', 10],
  ['link-local', '169.254.0.0', 16],
  ['reserved', '192.0.0.0', 24],
  ['multicast', '224.0.0.0', 4],
  ['reserved', '240.0.0.0', 4],
  ['unspecified', '::', 128],
  ['loopback', '::1', 128],
  ['private (ULA)', 'fc00::', 7],
  ['link-local', 'fe80::', 10],
  ['site-local', 'fec0::', 10],
  ['multicast', 'ff00::', 8],
];
// BlockList matches IPv4-mapped IPv6 addresses (::ffff:127.0.0.1, ::ffff:7f00:1) against IPv4 ranges.

const rangesByKind = new Map<string, BlockList>();
for (const [kind, network, prefix] of specialRanges) {
  let list = rangesByKind.get(kind);
  if (!list) rangesByKind.set(kind, (list = new BlockList()));
  list.addSubnet(network, prefix, isIP(network) === 6 ? 'ipv6' : 'ipv4');
}

const familyOf = (address: string): 'ipv4' | 'ipv6' => (isIP(address) === 6 ? 'ipv6' : 'ipv4');

/** What kind of special address `address` is (`loopback`, `private`, …), or undefined for a public one. */
export function specialKind(address: string): string | undefined {
  for (const [kind, list] of rangesByKind) if (list.check(address, familyOf(address))) return kind;
  return undefined;
}

/** A registry the policy refuses; the registry client turns it into a 4xx or 502 naming the registry. */
export class RegistryRefused extends Error {
  override name = 'RegistryRefused';
}

/** The policy's refusal behind an error: thrown itself, or the cause of a failed connection (its lookup refused every address). */
export function refusalIn(error: unknown): RegistryRefused | undefined {
  if (error instanceof RegistryRefused) return error;
  const cause = (error as { cause?: unknown } | undefined)?.cause;
  return cause instanceof RegistryRefused ? cause : undefined;
}

const ALLOW_SYNTAX = 'host, host:port, [IPv6]:port or an address range such as 10.0.0.0/8';
const HOST_NAME = /^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$/;

/** Strips IPv6 brackets and lowercases, as URL.hostname and image references spell hosts. */
export const bare = (host: string): string => host.replace(/^\[(.*)\]$/, '$1').toLowerCase();

/** The operator's --allowed-registry entries: names (with or without a port) and address ranges. */
export class RegistryAllowList {
  private readonly named: { host: string; port?: number }[] = [];
  private readonly ranges = new BlockList();
  private hasRanges = false;

  /** Throws an Error naming the entry, the flag and the syntax when an entry is not one of ALLOW_SYNTAX. */
  constructor(
    entries: readonly string[],
    private readonly flag = '--allowed-registry',
  ) {
    for (const entry of entries) this.add(entry.trim());
  }

  /** Whether the operator named this host (and port, when the entry gives one). */
  names(hostname: string, port: number): boolean {
    const host = bare(hostname);
    return this.named.some((entry) => entry.host === host && (entry.port === undefined || entry.port === port));
  }

  /** Whether an address entry or range (without a port) covers `address`. */
  covers(address: string): boolean {
    return this.hasRanges && this.ranges.check(address, familyOf(address));
  }

  private add(entry: string): void {
    const refuse = () => new Error(`${this.flag} takes ${ALLOW_SYNTAX}, got ${entry}`);
    const range = /^([^/]+)\/(\d{1,3})$/.exec(entry);
    if (range) {
      const [, network, prefixText] = range;
      const prefix = Number(prefixText);
      const family = isIP(network!);
      if (family === 0 || prefix > (family === 4 ? 32 : 128)) throw refuse();
      this.addRange(network!, prefix);
      return;
    }
    const withPort = /^(\[[^\]]+\]|[^:\]]+):(\d{1,5})$/.exec(entry);
    const host = bare(withPort ? withPort[1]! : entry);
    const port = withPort ? Number(withPort[2]) : undefined;
    if (port !== undefined && (port < 1 || port > 65535)) throw refuse();
    if (isIP(host) === 0 && !HOST_NAME.test(host)) throw refuse();
    this.named.push(port === undefined ? { host } : { host, port });
    // An address without a port also allows host names that resolve to it.
    if (isIP(host) !== 0 && port === undefined) this.addRange(host, isIP(host) === 4 ? 32 : 128);
  }

  private addRange(network: string, prefix: number): void {
    this.ranges.addSubnet(network, prefix, familyOf(network));
    this.hasRanges = true;
  }
}

/** Why the policy refuses `address`, or undefined when it may be contacted. */
export function refusalOf(address: string, allowed: RegistryAllowList): string | undefined {
  const kind = specialKind(address);
  return kind === undefined || allowed.covers(address) ? undefined : `${address} is a ${kind} address`;
}

type LookupCallback = (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * A `lookup` for net.connect (through undici's connect options) that resolves as usual and keeps
 * only the addresses the policy allows; none left → RegistryRefused naming what the name resolved to.
 */
export function checkedLookup(allowed: RegistryAllowList) {
  return (hostname: string, options: LookupOptions, callback: LookupCallback): void => {
    dnsLookup(hostname, { ...options, all: true }, (error, addresses) => {
      if (error) return callback(error, []);
      const usable = addresses.filter((entry) => refusalOf(entry.address, allowed) === undefined);
      if (usable.length === 0) {
        const found = addresses.map((entry) => `${entry.address} (${specialKind(entry.address) ?? 'public'})`).join(', ');
        return callback(new RegistryRefused(`${hostname} resolves only to addresses not allowed: ${found || 'none'}`), []);
      }
      if (options.all) return callback(null, usable);
      return callback(null, usable[0]!.address, usable[0]!.family);
    });
  };
}

/** The port a URL connects to. */
export const portOf = (url: URL): number => Number(url.port || (url.protocol === 'https:' ? 443 : 80));

/**
 * Why a request to `url` would be refused now, resolving a name as a connection would, or
 * undefined; a name that does not resolve now is not refused (a connection checks it again).
 */
export async function destinationRefusal(url: URL, allowed: RegistryAllowList): Promise<string | undefined> {
  const host = bare(url.hostname);
  if (allowed.names(host, portOf(url))) return undefined;
  if (isIP(host) !== 0) return refusalOf(host, allowed);
  const lookup = checkedLookup(allowed);
  return new Promise((resolve) => lookup(host, { all: true }, (error) => resolve(error instanceof RegistryRefused ? error.message : undefined)));
}
