import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { resolveConfig } from '../src/config.js';
import { haproxyFiles, haproxySettings } from '../src/roles/gateway/haproxy-data-plane.js';
import { connectionHeadersLua, haproxyConfig, hostsMapFile, poolBackendName, routeLabel, routesMapFile, slotsFor, unitsMapFile, type BackendConfig, type HaproxyFiles, type TlsBind, type TrafficLogTarget } from '../src/roles/gateway/haproxy-config.js';
import { freePort } from '../test/harness/free-port.js';
import { runHaproxy, type ReferenceHaproxy } from './reference-haproxy.js';

// The gateway's generated haproxy.cfg (haproxyConfig with the gateway's default settings) for one
// service's units, run by hand beside the data plane: what the plane's configuration costs apart
// from the gateway driving it (its servers come through the Runtime API, this one's from the
// file). `shared` runs it with one backend shared by HAProxy's threads instead of a copy per
// thread (the plane before 2026-11-24), so a difference between the two is the copies' own.

export type BackendLayout = 'per-thread' | 'shared';

/**
 * The generated configuration with one backend for all threads: written for one thread (one copy,
 * a unit's whole connection cap), then given the machine's threads, all routed to that copy.
 */
export function sharedBackend(config: string, threads: number): string {
  const shared = config.replace(/^ {2}nbthread 1$/m, `  nbthread ${threads}`).replace('use_backend %[var(txn.backend)].%[thread]', 'use_backend %[var(txn.backend)].0');
  if (!shared.includes(`nbthread ${threads}`) || shared.includes('%[thread]')) throw new Error('the generated configuration changed shape: update sharedBackend');
  return shared;
}

/** What the generated configuration routes: `service` as `host`, to `addresses`, heard on `port` (and `tls`, if given). */
export interface GeneratedRoute {
  service: string;
  host: string;
  addresses: readonly string[];
  port: number;
  /** The gateway's own server; nothing needs to listen there when every request is routed. */
  ownPort: number;
  tls?: TlsBind;
  /** Where HAProxy sends its latency lines and how sampled (haproxy-traffic-log.ts); none: no traffic log, as the plane before issue 31. */
  trafficLog?: TrafficLogTarget;
}

/**
 * Writes the files the generated configuration reads (maps, Lua) into `dir`, slots as the plane
 * gives them, and returns the configuration with the gateway's default settings and `layout`.
 */
export function writeGeneratedConfig(dir: string, route: GeneratedRoute, layout: BackendLayout = 'per-thread'): { config: string; files: HaproxyFiles } {
  const gateway = resolveConfig({ role: 'gateway' }, {});
  const settings = haproxySettings(gateway);
  const files = haproxyFiles(dir);
  const backend: BackendConfig = {
    name: poolBackendName(0),
    label: routeLabel({ kind: 'service', name: route.service }),
    slots: Array.from({ length: slotsFor(route.addresses.length) }, (_, i) => (i < route.addresses.length ? { address: route.addresses[i]!, unit: `${route.service}.${i + 1}` } : {})),
  };
  writeFileSync(files.lua, connectionHeadersLua);
  writeFileSync(files.hostsMap, hostsMapFile(new Map([[route.host, backend.name]])));
  writeFileSync(files.unitsMap, unitsMapFile([backend]));
  writeFileSync(files.routesMap, routesMapFile([backend]));
  const input = {
    listeners: [{ host: '127.0.0.1', port: route.port, name: 'public' as const }],
    internalDomain: gateway.gateway.internalDomain,
    ownPort: route.ownPort,
    files,
    backends: [backend],
    ...(route.tls === undefined ? {} : { tls: route.tls }),
    ...(route.trafficLog === undefined ? {} : { trafficLog: route.trafficLog }),
  };
  const config = layout === 'shared' ? sharedBackend(haproxyConfig({ ...input, settings: { ...settings, threads: 1 } }), settings.threads) : haproxyConfig({ ...input, settings });
  return { config, files };
}

/**
 * Runs the generated configuration routing `service` (`host`) to `addresses`, slots as the plane
 * gives them; with `trafficLog`, logging latency lines there (every request's, or sampled as the plane does).
 */
export async function startGeneratedHaproxy(
  service: string,
  host: string,
  addresses: string[],
  layout: BackendLayout,
  ready: (port: number) => Promise<boolean>,
  trafficLog?: TrafficLogTarget,
): Promise<ReferenceHaproxy> {
  const dir = mkdtempSync(join(tmpdir(), 'platform-generated-haproxy-'));
  const [port, ownPort] = [await freePort(), await freePort()];
  const { config, files } = writeGeneratedConfig(dir, { service, host, addresses, port, ownPort, ...(trafficLog === undefined ? {} : { trafficLog }) }, layout);
  return runHaproxy(dir, port, files.runtimeSocket, config, ready);
}
