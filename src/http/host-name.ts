import type { Component } from '../store/keys.js';

// Host header → the host name routes are keyed by. Pure, and on the hot path: no regular
// expressions, one slice at most, and toLowerCase returns the same string when nothing changes.

/** The host of a Host header in lower case, without a `:port` suffix or a trailing dot ("" when absent). */
export function hostName(header: string | undefined): string {
  if (header === undefined || header.length === 0) return '';
  let end = header.length;
  if (header.charCodeAt(0) === 91 /* [ */) {
    // An IPv6 literal keeps its brackets: [::1]:8080 → [::1]
    const close = header.indexOf(']');
    if (close !== -1) end = close + 1;
  } else {
    const colon = header.indexOf(':');
    if (colon !== -1) end = colon;
  }
  if (end > 0 && header.charCodeAt(end - 1) === 46 /* . */) end -= 1;
  return (end === header.length ? header : header.slice(0, end)).toLowerCase();
}

export interface Domains {
  /** Public domain: `<service>.<domain>` reaches public-facing services. */
  domain: string;
  /** Internal domain: `<service>.<internalDomain>` reaches every load-balanced service. */
  internalDomain: string;
}

/** Whether `host` is `<label>.<domain>` or `<label>.<internal-domain>`: a name the gateway routes (or answers 404 for). */
export function isServiceHost(host: string, domains: Domains): boolean {
  const dot = host.indexOf('.');
  if (dot <= 0) return false;
  const zone = host.slice(dot + 1);
  return zone === domains.domain || zone === domains.internalDomain;
}

/** Components reachable on both domains, and those reachable only on the internal one. */
const publicComponents: readonly Component[] = ['orchestrator', 'web'];
const internalComponents: readonly Component[] = ['service-directory', 'scheduler'];

/** The names a component is routed under (with --expose-components). */
export function componentHosts(component: Component, domains: Domains): string[] {
  if (publicComponents.includes(component)) return [`${component}.${domains.internalDomain}`, `${component}.${domains.domain}`];
  return internalComponents.includes(component) ? [`${component}.${domains.internalDomain}`] : [];
}

/** Every name the gateway may route to a platform component: the components answer them (host-rule.ts). */
export const componentHostNames = (domains: Domains): string[] =>
  [...publicComponents, ...internalComponents].flatMap((component) => componentHosts(component, domains));
