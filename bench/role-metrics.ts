import { readFileSync } from 'node:fs';

// What benchmarks read off a running role: its store reads (from its /metrics) and its memory
// (from /proc, and Node's own figures from its /metrics).

/** Store reads a role made so far (requests, and keys they returned): its platform_store_reads_total and platform_store_keys_read_total. */
export async function storeReads(roleUrl: string): Promise<{ requests: number; keys: number }> {
  const text = await (await fetch(`${roleUrl}/metrics`, { signal: AbortSignal.timeout(30_000) })).text();
  const sum = (name: string) => [...text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.e+]+)$`, 'gm'))].reduce((total, match) => total + Number(match[1]), 0);
  return { requests: sum('platform_store_reads_total'), keys: sum('platform_store_keys_read_total') };
}

/** A process's resident memory (VmRSS) in MiB. */
export const rssMiB = (pid: number): number => processMemory(pid).rss / 2 ** 20;

/**
 * A process's memory, in bytes: resident in all (VmRSS), of it anonymous memory (the heaps, what
 * the process allocated) and file pages (the node binary and shared libraries mapped in); and, for
 * a role, what its /metrics says of V8's heap (prom-client's default series).
 */
export interface RoleMemory {
  rss: number;
  rssAnon: number;
  rssFile: number;
  heapUsed?: number;
  heapTotal?: number;
  /** V8's young generation: its size (its semispaces are resident whether used or not). */
  newSpace?: number;
  /** Used bytes of the old generation, of compiled code, and of large objects (each in pages of its own). */
  oldSpace?: number;
  codeSpace?: number;
  largeObjects?: number;
  /** Memory outside V8's heap that JavaScript objects hold (Buffers, ArrayBuffers, WebAssembly memory). */
  external?: number;
}

export function processMemory(pid: number): RoleMemory {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN) * 1024;
  return { rss: kib('VmRSS'), rssAnon: kib('RssAnon'), rssFile: kib('RssFile') + kib('RssShmem') };
}

/** processMemory, read first (a scrape allocates), and then the role's /metrics. */
export async function memoryOf(pid: number, roleUrl: string): Promise<RoleMemory> {
  const memory = processMemory(pid);
  const text = await (await fetch(`${roleUrl}/metrics`, { signal: AbortSignal.timeout(30_000) })).text();
  const value = (series: string) => {
    const line = text.split('\n').find((candidate) => candidate.startsWith(`${series} `));
    return line === undefined ? undefined : Number(line.slice(series.length + 1));
  };
  const space = (name: string, figure: 'used' | 'total' = 'used') => value(`nodejs_heap_space_size_${figure}_bytes{space="${name}"}`);
  return {
    ...memory,
    heapUsed: value('nodejs_heap_size_used_bytes'),
    heapTotal: value('nodejs_heap_size_total_bytes'),
    newSpace: space('new', 'total'),
    oldSpace: space('old'),
    codeSpace: space('code'),
    largeObjects: space('large_object'),
    external: value('nodejs_external_memory_bytes'),
  };
}
