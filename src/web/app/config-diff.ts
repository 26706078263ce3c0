import { shortDigest } from './format.js';
import type { PortMapping, ServiceConfig } from './model.js';

// What changed between two releases (or between the running release and the next config), in
// lines a person reads: "GREETING: "hi" → "hello"", "units 3 → 5", "image 0a1b… → 9f8e…".

export interface ConfigVersion {
  digest?: string;
  config: ServiceConfig;
}

const quote = (value: string): string => JSON.stringify(value.length > 60 ? `${value.slice(0, 57)}…` : value);
const formatPorts = (ports: PortMapping[]): string => (ports.length ? ports.map((p) => (p.host ? `${p.host}:${p.container}` : `${p.container}`)).join(', ') : 'none');

export function describeChanges(before: ConfigVersion, after: ConfigVersion): string[] {
  const lines: string[] = [];
  if (before.digest && after.digest && before.digest !== after.digest) lines.push(`image ${shortDigest(before.digest)} → ${shortDigest(after.digest)}`);
  if (before.config.numInstances !== after.config.numInstances) lines.push(`units ${before.config.numInstances} → ${after.config.numInstances}`);
  const names = [...new Set([...Object.keys(before.config.env), ...Object.keys(after.config.env)])].sort();
  for (const name of names) {
    const [was, is] = [before.config.env[name], after.config.env[name]];
    if (was === is) continue;
    if (was === undefined) lines.push(`+ ${name}=${quote(is!)}`);
    else if (is === undefined) lines.push(`− ${name} (was ${quote(was)})`);
    else lines.push(`${name}: ${quote(was)} → ${quote(is)}`);
  }
  if (formatPorts(before.config.ports) !== formatPorts(after.config.ports)) lines.push(`ports ${formatPorts(before.config.ports)} → ${formatPorts(after.config.ports)}`);
  const settings = new Set([...Object.keys(before.config), ...Object.keys(after.config)] as (keyof ServiceConfig)[]);
  for (const name of ['numInstances', 'env', 'ports'] as const) settings.delete(name);
  for (const name of [...settings].sort()) {
    const [was, is] = [JSON.stringify(before.config[name]), JSON.stringify(after.config[name])];
    if (was !== is) lines.push(`${name} ${was ?? 'default'} → ${is ?? 'default'}`);
  }
  return lines;
}
