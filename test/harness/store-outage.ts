import type Docker from 'dockerode';
import type { EtcdProcess } from './etcd.js';
import { http } from './platform.js';
import { waitFor } from './wait.js';

// What the store-outage test and benchmark share: the two ways etcd goes away, what a unit's
// restart or move changes, and the wait after the store returns until any machine could have
// counted as lost.

export interface StoreAbsence {
  /** How it is named in a test or a table. */
  name: 'stopped' | 'frozen';
  take(): Promise<void>;
  bring(): Promise<void>;
}

/**
 * Stopped: SIGTERM, then started again on its data directory (a crash, a maintenance stop; etcd
 * gives every lease a full TTL again when it leads). Frozen: SIGSTOP then SIGCONT (a stalled disk
 * or VM; etcd revokes every lease that expired meanwhile the moment it wakes).
 */
export const storeAbsences = (etcd: EtcdProcess): StoreAbsence[] => [
  { name: 'stopped', take: () => etcd.stop(), bring: () => etcd.restart() },
  { name: 'frozen', take: async () => etcd.freeze(), bring: async () => etcd.thaw() },
];

/** Each unit container of `service`: its id and start time, what a restart or a move changes. */
export async function unitContainers(docker: Docker, service: string): Promise<Record<string, string>> {
  const listed = await docker.listContainers({ all: true, filters: { label: [`platform.service=${service}`] } });
  const inspected = await Promise.all(listed.map((c) => docker.getContainer(c.Id).inspect()));
  return Object.fromEntries(inspected.map((c) => [c.Name.replace(/^\//, ''), `${c.Id} started ${c.State.StartedAt} running ${c.State.Running}`]));
}

/**
 * Waits until the scheduler at `schedulerUrl` leads and has healed after every old lease could
 * have expired (a TTL after the store returned at `returnedAt`) and after its renewal grace (3
 * TTLs) ended: a machine that counted as lost would have had its units moved by then.
 */
export async function healedAfterReturn(schedulerUrl: string, returnedAt: number, leaseTtlSeconds: number): Promise<void> {
  await waitFor(async () => {
    const state = (await http('GET', `${schedulerUrl}/readyz`)).body as { leader?: boolean; renewalGraceUntil?: string; healedAt?: string };
    const graceEnd = Math.max(Date.parse(state.renewalGraceUntil ?? '') || 0, returnedAt + 3 * leaseTtlSeconds * 1000);
    return state.leader === true && Date.parse(state.healedAt ?? '') > graceEnd;
  }, 120_000, { intervalMs: 250, what: 'the scheduler to lead and heal after the store returned and its renewal grace ended' });
}
