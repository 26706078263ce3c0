import { Counter } from 'prom-client';
import { metricsRegistry } from '../http/metrics.js';

// Reads each store implementation makes, for /metrics: how much a role leans on the store (a loop
// that re-reads prefixes shows up here) and the figure the rollout benchmark compares.

const reads = new Counter({
  name: 'platform_store_reads_total',
  help: 'Store reads made by this process: get (one key) and list (a prefix), with the keys they returned.',
  labelNames: ['op'] as const,
  registers: [metricsRegistry],
});

const keysRead = new Counter({
  name: 'platform_store_keys_read_total',
  help: 'Keys returned by store reads (get and list) made by this process.',
  registers: [metricsRegistry],
});

export function countRead(op: 'get' | 'list', keys: number): void {
  reads.inc({ op });
  keysRead.inc(keys);
}
