import type { Dispatcher, request as undiciRequest } from 'undici';

// undici's `request`, loaded with a process's first call of it rather than when a role starts
// (issue 29: every role <= 100 MiB idle). Its hundred modules and their compiled code were some
// 5 MiB of an idle orchestrator's, scheduler's and agent's memory, for calls an idle role never
// makes (unit logs and job stdin from agents, registry lookups, notifications, health checks).

export async function request(...args: Parameters<typeof undiciRequest>): Promise<Dispatcher.ResponseData> {
  const undici = await import('undici');
  return (await undici.request(...args)) as Dispatcher.ResponseData;
}
