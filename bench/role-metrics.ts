import { readFileSync } from 'node:fs';

// What benchmarks read off a running role: its store reads (from its /metrics) and its resident
// memory (from /proc).

/** Store reads a role made so far (requests, and keys they returned): its platform_store_reads_total and platform_store_keys_read_total. */
export async function storeReads(roleUrl: string): Promise<{ requests: number; keys: number }> {
  const text = await (await fetch(`${roleUrl}/metrics`, { signal: AbortSignal.timeout(30_000) })).text();
  const sum = (name: string) => [...text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.e+]+)$`, 'gm'))].reduce((total, match) => total + Number(match[1]), 0);
  return { requests: sum('platform_store_reads_total'), keys: sum('platform_store_keys_read_total') };
}

/** A process's resident memory (VmRSS) in MiB. */
export const rssMiB = (pid: number): number => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;
