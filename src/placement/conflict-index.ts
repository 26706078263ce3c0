import type { ServiceRules } from './planner.js';
import { compileServiceGlob } from '../service-glob.js';

// Which services may not share a machine with a given one, for clusters of many services.
// A conflict holds when either side's glob matches the other's name, or both bind the same fixed
// host port. Testing every glob against every name is quadratic, so globs are indexed by shape:
// a literal (`db`) is a map lookup, a prefix (`web-*`) is found through the name's prefixes, and
// only other shapes are tested one by one.

const PREFIX_GLOB = /^[a-z0-9-]*\*$/;
const LITERAL = /^[a-z0-9-]+$/;

export class ConflictIndex {
  private readonly rules = new Map<string, ServiceRules>();
  private readonly names: string[] = [];
  /** Services by the literal name their glob names. */
  private readonly literalGlobs = new Map<string, string[]>();
  /** Services by the prefix of their `prefix*` glob. */
  private readonly prefixGlobs = new Map<string, string[]>();
  /** Services whose glob has another shape, with its matcher. */
  private readonly otherGlobs: { service: string; matches: (name: string) => boolean }[] = [];
  private readonly byHostPort = new Map<number, string[]>();
  private readonly cache = new Map<string, ReadonlySet<string>>();
  private sortedNames: string[] | undefined;

  constructor(rules: Iterable<ServiceRules>) {
    for (const rule of rules) this.add(rule);
  }

  /** Rules of a service, or none when it declares no constraint. */
  rulesOf(service: string): ServiceRules {
    return this.rules.get(service) ?? { service, conflictsWith: '', hostPorts: [] };
  }

  /** Every known service whose units may not share a machine with units of `service` (itself included when it matches). */
  conflictsOf(service: string): ReadonlySet<string> {
    let found = this.cache.get(service);
    if (!found) {
      found = this.compute(this.rulesOf(service));
      this.cache.set(service, found);
    }
    return found;
  }

  private add(rule: ServiceRules): void {
    if (this.rules.has(rule.service)) return;
    this.rules.set(rule.service, rule);
    this.names.push(rule.service);
    const glob = rule.conflictsWith;
    if (glob && LITERAL.test(glob)) push(this.literalGlobs, glob, rule.service);
    else if (glob && PREFIX_GLOB.test(glob)) push(this.prefixGlobs, glob.slice(0, -1), rule.service);
    else if (glob) this.otherGlobs.push({ service: rule.service, matches: compileServiceGlob(glob) });
    for (const port of rule.hostPorts) push(this.byHostPort, port, rule.service);
  }

  private compute(rule: ServiceRules): Set<string> {
    const found = new Set<string>();
    // Its glob, against every name.
    for (const name of this.namesMatching(rule.conflictsWith)) found.add(name);
    // Every glob, against its name.
    for (const service of this.literalGlobs.get(rule.service) ?? []) found.add(service);
    for (let length = 0; length <= rule.service.length; length++) {
      for (const service of this.prefixGlobs.get(rule.service.slice(0, length)) ?? []) found.add(service);
    }
    for (const other of this.otherGlobs) if (other.matches(rule.service)) found.add(other.service);
    // Two units binding one fixed host port cannot share a machine, of one service or of two.
    for (const port of rule.hostPorts) for (const service of this.byHostPort.get(port) ?? []) found.add(service);
    return found;
  }

  private namesMatching(glob: string): string[] {
    if (!glob) return [];
    if (LITERAL.test(glob)) return this.rules.has(glob) ? [glob] : [];
    if (PREFIX_GLOB.test(glob)) return this.namesWithPrefix(glob.slice(0, -1));
    const matches = compileServiceGlob(glob);
    return this.names.filter((name) => matches(name));
  }

  private namesWithPrefix(prefix: string): string[] {
    this.sortedNames ??= [...this.names].sort();
    const names = this.sortedNames;
    let low = 0;
    let high = names.length;
    while (low < high) {
      const mid = (low + high) >> 1;
      if (names[mid]! < prefix) low = mid + 1;
      else high = mid;
    }
    const found: string[] = [];
    for (let i = low; i < names.length && names[i]!.startsWith(prefix); i++) found.push(names[i]!);
    return found;
  }
}

function push<K, V>(map: Map<K, V[]>, key: K, value: V): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}
