import { networkInterfaces } from 'node:os';
import type { FastifyRequest } from 'fastify';
import { badRequest, HttpError } from './errors.js';
import type { RequestRule } from './request-rules.js';
import { componentHostNames, hostName, type Domains } from './host-name.js';

// DNS rebinding: a page on attacker.example whose name re-resolves to 127.0.0.1 makes the browser
// send this machine's API a same-origin request (`Host: attacker.example:9000`), cookies and all.
// The Host header is the one thing such a request cannot fake, so every API role answers only the
// names it is reached by, as Django's ALLOWED_HOSTS and Vite's allowedHosts do; anything else is
// 421 Misdirected Request, before a token or a session cookie is looked at.
// Only the name is compared: ports are changed by port mappings and proxies, and an attacker
// controls the name, never the port a rebound address leads to.

export interface HostRuleSettings {
  /** The address the roles listen on; 0.0.0.0 and :: stand for every address of this machine. */
  listenHost: string;
  /** The host part of --advertise (other roles reach this one there). */
  advertiseHost: string;
  /** --allowed-host, as parseAllowedHosts returned it. */
  allowed: readonly string[];
  /** The gateway's domains: `--expose-components` routes the components' names under them here. */
  domains: Domains;
}

/** Names every role answers, whatever it listens on. */
const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '[::1]'];
const WILDCARD_LISTEN = new Set(['0.0.0.0', '::', '[::]', '']);
/** A miss re-reads the machine's interfaces at most this often (addresses come and go: DHCP, Docker networks). */
const INTERFACE_REFRESH_MS = 10_000;

/** An IPv6 address as a Host header spells it (brackets), IPv4 addresses and names unchanged. */
const asHostName = (address: string): string => (address.includes(':') && !address.startsWith('[') ? `[${address}]` : address).toLowerCase();

function interfaceAddresses(): string[] {
  return Object.values(networkInterfaces())
    .flatMap((addresses) => addresses ?? [])
    .map((address) => asHostName(address.address));
}

/**
 * `--allowed-host` entries → canonical host names: a name or IP address (an IPv6 one with or
 * without brackets), `.example.com` for a domain and every name under it, or `*` for any Host (the
 * rule off, for a proxy in front that checks names itself). Throws with the entry that is none of these.
 */
export function parseAllowedHosts(text: string, fail: (message: string) => Error): string[] {
  return text
    .split(',')
    .map((entry) => entry.trim())
    .filter(Boolean)
    .map((entry) => {
      if (entry === '*') return entry;
      const suffix = entry.startsWith('.') ? '.' : '';
      const name = canonicalName(entry.slice(suffix.length));
      if (name === undefined) {
        throw fail(`--allowed-host takes host names or IP addresses without a port (example.com, .example.com for it and its subdomains, 10.0.0.5, *), got ${entry}`);
      }
      return `${suffix}${name}`;
    });
}

/** The name as the browser sends it in Host (lower case, IPv6 in brackets, IDNs in punycode); undefined when it is not a bare host. */
function canonicalName(entry: string): string | undefined {
  if (entry === '' || /[/?#@\s\\]/.test(entry)) return undefined;
  const bare = entry.includes(':') && !entry.startsWith('[') ? `[${entry}]` : entry;
  try {
    const url = new URL(`http://${bare}`);
    return url.port === '' && url.host === url.hostname ? url.hostname.replace(/\.$/, '') : undefined;
  } catch {
    return undefined;
  }
}

export class HostRule {
  private readonly names: Set<string>;
  private readonly suffixes: string[];
  private readonly any: boolean;
  private readonly everyInterface: boolean;
  private interfaces = new Set<string>();
  private interfacesReadAt = 0;

  constructor(settings: HostRuleSettings) {
    const listen = asHostName(settings.listenHost);
    this.everyInterface = WILDCARD_LISTEN.has(listen);
    this.any = settings.allowed.includes('*');
    this.suffixes = settings.allowed.filter((entry) => entry.startsWith('.'));
    this.names = new Set([
      ...LOOPBACK_NAMES,
      ...(this.everyInterface ? [] : [listen]),
      asHostName(settings.advertiseHost),
      ...componentHostNames(settings.domains),
      ...settings.allowed.filter((entry) => entry !== '*' && !entry.startsWith('.')),
    ]);
  }

  /** Whether a request with this Host header is for us. No Host at all (HTTP/1.0) cannot come from a browser. */
  allows(hostHeader: string | undefined): boolean {
    const name = hostName(hostHeader);
    if (this.any || name === '' || this.names.has(name)) return true;
    if (this.suffixes.some((suffix) => name.endsWith(suffix) || name === suffix.slice(1))) return true;
    return this.everyInterface && this.isInterfaceAddress(name);
  }

  private isInterfaceAddress(name: string): boolean {
    if (this.interfaces.has(name)) return true;
    if (Date.now() - this.interfacesReadAt < INTERFACE_REFRESH_MS) return false;
    this.interfaces = new Set(interfaceAddresses());
    this.interfacesReadAt = Date.now();
    return this.interfaces.has(name);
  }
}

/** A load balancer's probe carries whatever Host it likes and learns only that the role is alive. */
const isExempt = (request: FastifyRequest): boolean => request.routeOptions.url === '/healthz';

function misdirected(hostHeader: string): HttpError {
  const shown = hostHeader.length > 100 ? `${hostHeader.slice(0, 100)}…` : hostHeader;
  const name = hostName(hostHeader);
  return new HttpError(
    421,
    `Host ${shown} is not a name of this platform (the DNS-rebinding rule): a role answers only its listen and advertise addresses, localhost and the --allowed-host list; ` +
      `if ${name} is yours, start the roles with --allowed-host ${name} (or PLATFORM_ALLOWED_HOSTS)`,
  );
}

/**
 * The request-target and Host checks, first of everything a role server does with a request.
 * Absolute-form targets (`GET http://x/services`) are meant for proxies; the roles are none, and
 * the dashboard's pass-through would otherwise glue the target onto the orchestrator's URL.
 */
export const hostRequestRule =
  (rule: HostRule | undefined): RequestRule =>
  (request) => {
    if (!(request.raw.url ?? '/').startsWith('/')) {
      return badRequest('the request target must be a path such as /services (origin-form): absolute-form targets are for proxies, and this is not one');
    }
    const host = request.headers.host;
    // The name first: the exemption reads request.routeOptions, which Fastify builds anew on every read.
    if (rule !== undefined && !rule.allows(host) && !isExempt(request)) return misdirected(host ?? '');
    return undefined;
  };
