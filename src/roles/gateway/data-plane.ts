import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { DataPlaneChoice } from '../../config.js';
import type { PlannedRoute } from './route-plan.js';
import type { RouteView } from './route-table.js';
import type { GatewayListeners } from './listener-policy.js';
import type { StopReason } from '../role.js';

// What forwards the gateway's requests. The route plan is computed once (route-watch.ts); a data
// plane applies it: the built-in Node proxy (node-data-plane.ts), or HAProxy driven through its
// Runtime API (haproxy-data-plane.ts), which is much cheaper per request where it is installed.

export type DataPlaneKind = 'haproxy' | 'node';

export interface DataPlane {
  readonly kind: DataPlaneKind;
  /** Applies a new route plan (called with every plan, in order). */
  apply(plan: readonly PlannedRoute[]): void;
  listen(listeners: GatewayListeners): Promise<void>;
  /** The ports it listens on once `listen` resolved (the Node server behind HAProxy included). */
  listeningPorts(): number[];
  /** What /readyz reports; throws when the data plane cannot forward requests now. */
  readiness(): Record<string, unknown>;
  /** Records the request counts of every finished interval that are read rather than counted as requests are answered (HAProxy's), before GET /traffic answers. */
  countFinishedIntervals?(): Promise<void>;
  /** The routes as the data plane holds them, for GET /routes. */
  view(): RouteView[] | Promise<RouteView[]>;
  /** On a `restart`, a data plane that can outlive the process (HAProxy) is left serving for the next one to adopt. */
  close(reason?: StopReason): Promise<void>;
}

/** The oldest HAProxy the generated configuration and the Runtime API commands are written for. */
const MINIMUM = [2, 6] as const;

/** The version an haproxy executable reports (`haproxy -v`), or undefined when it does not run. */
export async function haproxyVersion(bin: string): Promise<[number, number] | undefined> {
  try {
    const { stdout } = await promisify(execFile)(bin, ['-v'], { timeout: 5_000 });
    const match = /HA-?Proxy version (\d+)\.(\d+)/.exec(stdout);
    return match ? [Number(match[1]), Number(match[2])] : undefined;
  } catch {
    return undefined;
  }
}

const recentEnough = ([major, minor]: [number, number]): boolean => major > MINIMUM[0] || (major === MINIMUM[0] && minor >= MINIMUM[1]);

/**
 * `auto` is HAProxy when a recent enough one runs, else Node; `haproxy` insists on one (an error
 * naming the flag otherwise), so an operator who asked for it never silently gets the slower plane.
 */
export async function chooseDataPlane(choice: DataPlaneChoice, bin: string): Promise<DataPlaneKind> {
  if (choice === 'node') return 'node';
  const version = await haproxyVersion(bin);
  const usable = version !== undefined && recentEnough(version);
  if (usable) return 'haproxy';
  if (choice === 'auto') return 'node';
  const found = version === undefined ? `${bin} does not run` : `${bin} is version ${version.join('.')}`;
  throw new Error(`--data-plane haproxy needs HAProxy ${MINIMUM.join('.')} or later: ${found} (install Debian's haproxy, or give --haproxy-bin)`);
}
