import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Gateway } from '../test/harness/gateway-cluster.js';

// CPU time the proxies spend, from /proc: on a machine shared with the load generator and the
// units, a proxy's CPU time per request is steadier than its requests per second.

/** The HAProxy data plane's worker processes (children of the master its pidfile names), which do the proxying. */
export function haproxyWorkers(gateway: Gateway): number[] {
  const master = Number(readFileSync(join(gateway.dataDir, `gateway-${gateway.port}`, 'haproxy.pid'), 'utf8'));
  return readFileSync(`/proc/${master}/task/${master}/children`, 'utf8').trim().split(/\s+/).map(Number);
}

/** A process's user and system CPU time (every thread's), in clock ticks (100 per second on Linux), from /proc/<pid>/stat. */
export function userSystemTicks(pid: number): [number, number] {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return [Number(fields[11]), Number(fields[12])];
}

/** utime + stime of processes, in clock ticks. */
export const cpuTicks = (pids: number[]): number =>
  pids.reduce((sum, pid) => {
    const [user, system] = userSystemTicks(pid);
    return sum + user + system;
  }, 0);

/** Microseconds of CPU per request from a cpuTicks difference. */
export const cpuUsPerRequest = (ticks: number, requests: number): number => (requests > 0 ? (ticks * 10_000) / requests : 0);

/** CPU time a process has run, every thread, in nanoseconds (/proc/<pid>/task/<tid>/schedstat): finer than the ticks' 10 ms. */
export const processCpuNanoseconds = (pid: number): number =>
  readdirSync(`/proc/${pid}/task`).reduce((threads, tid) => threads + Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]), 0);

/** processCpuNanoseconds of several processes, added up. */
export const cpuNanoseconds = (pids: number[]): number => pids.reduce((sum, pid) => sum + processCpuNanoseconds(pid), 0);
