import { parseStat, runtimeCommand } from '../src/roles/gateway/haproxy-runtime.js';

// How an HAProxy spread requests over the units, from its own counters (`show stat` on its stats
// or runtime socket): for the gateway's plane, per thread's copy of the backend too.

export interface ServerCount {
  /** The backend (one thread's copy, `b_0.1`, on the plane). */
  backend: string;
  address: string;
  /** Sessions (requests, with units that close every connection) sent to the server so far. */
  sessions: number;
  /** Most requests that ever waited in the server's queue (its `maxconn` reached). */
  queuedMax: number;
}

/** The counters of the servers at `addresses`. */
export async function serverCounts(socket: string, addresses: readonly string[]): Promise<ServerCount[]> {
  const rows = parseStat(await runtimeCommand(socket, 'show stat -1 4 -1'));
  return rows
    .filter((row) => addresses.includes(row.addr!))
    .map((row) => ({ backend: row.pxname!, address: row.addr!, sessions: Number(row.stot), queuedMax: Number(row.qmax) }));
}

/** Sessions per `address` (all copies together) between two readings. */
export const sessionsBetween = (before: readonly ServerCount[], after: readonly ServerCount[], addresses: readonly string[]): number[] =>
  addresses.map((address) => {
    const sum = (counts: readonly ServerCount[]) => counts.filter((count) => count.address === address).reduce((total, count) => total + count.sessions, 0);
    return sum(after) - sum(before);
  });
