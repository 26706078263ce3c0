import { readFileSync, rmSync } from 'node:fs';
import { writeFileAtomically } from '../../atomic-file.js';
import type { HaproxyState } from './haproxy-slots.js';
import type { CounterReading } from '../../metrics-history/counter-deltas.js';

// What a gateway stopping for a restart leaves for the next one beside the HAProxy it leaves
// serving: the state HAProxy holds (its pool, slots and maps, as the Runtime API left them), the
// certificates it serves, and what its configuration was written from apart from the pool (the
// settings, the listeners, the gateway's own Node server's port, the HTTPS port). A next gateway started
// with the same flags listens on those ports again and goes on from the state with runtime commands: no
// reload, so no idle keep-alive connection of a client is closed. Read once: a gateway killed
// later than this was written leaves none, and its successor reloads HAProxy from its own state.

export interface Handover {
  /** The configuration without its backends (haproxyConfig with none): equal means no reload is needed. */
  fixedConfig: string;
  /** The gateway's own Node server on 127.0.0.1, which HAProxy's `backend own` names. */
  ownPort: number;
  /**
   * The HTTPS listener's port, when HAProxy has one: with `--https-port 0` a gateway picks a free
   * port, and its successor must take the same one, or the configuration differs and HAProxy reloads.
   */
  tlsPort?: number;
  /** The UDP port HAProxy sends its traffic lines to (haproxy-traffic-log.ts): the successor listens there again. */
  trafficLogPort?: number;
  /** The last reading of HAProxy's counters (haproxy-traffic-counters.ts): the successor counts on from it, losing no request. */
  counters?: CounterReading;
  state: HaproxyState;
  /** host → certificate fingerprint, as HAProxy serves them. */
  certificates: [string, string][];
}

interface StoredHandover {
  fixedConfig: string;
  ownPort: number;
  tlsPort?: number;
  trafficLogPort?: number;
  counters?: { source: number; rows: [string, number[]][] };
  backends: [string, unknown][];
  hosts: [string, string][];
  certificates: [string, string][];
}

export function writeHandover(file: string, handover: Handover): void {
  const stored: StoredHandover = {
    fixedConfig: handover.fixedConfig,
    ownPort: handover.ownPort,
    ...(handover.tlsPort === undefined ? {} : { tlsPort: handover.tlsPort }),
    ...(handover.trafficLogPort === undefined ? {} : { trafficLogPort: handover.trafficLogPort }),
    ...(handover.counters === undefined ? {} : { counters: { source: handover.counters.source, rows: [...handover.counters.rows].map(([key, values]) => [key, [...values]]) } }),
    backends: [...handover.state.backends],
    hosts: [...handover.state.hosts],
    certificates: handover.certificates,
  };
  writeFileAtomically(file, JSON.stringify(stored), { mode: 0o600 });
}

/** The handover a previous gateway left, removed as it is read (undefined if none, or unreadable). */
export function takeHandover(file: string): Handover | undefined {
  let stored: StoredHandover;
  try {
    stored = JSON.parse(readFileSync(file, 'utf8')) as StoredHandover;
  } catch {
    return undefined;
  } finally {
    rmSync(file, { force: true });
  }
  if (typeof stored.fixedConfig !== 'string' || !Number.isInteger(stored.ownPort) || !Array.isArray(stored.backends) || !Array.isArray(stored.hosts)) return undefined;
  return {
    fixedConfig: stored.fixedConfig,
    ownPort: stored.ownPort,
    ...(Number.isInteger(stored.tlsPort) ? { tlsPort: stored.tlsPort } : {}),
    ...(Number.isInteger(stored.trafficLogPort) ? { trafficLogPort: stored.trafficLogPort } : {}),
    ...(Number.isInteger(stored.counters?.source) && Array.isArray(stored.counters?.rows) ? { counters: { source: stored.counters!.source, rows: new Map(stored.counters!.rows) } } : {}),
    state: { backends: new Map(stored.backends) as HaproxyState['backends'], hosts: new Map(stored.hosts) },
    certificates: Array.isArray(stored.certificates) ? stored.certificates : [],
  };
}
