import { readFileSync } from 'node:fs';

// Prints benchmark results as one aligned table with a ratio column.

export interface BenchRow {
  benchmark: string;
  platform: string;
  reference: string;
  ratio: string;
  target: string;
}

export function printTable(rows: BenchRow[]): void {
  const headers: (keyof BenchRow)[] = ['benchmark', 'platform', 'reference', 'ratio', 'target'];
  const widths = headers.map((h) => Math.max(h.length, ...rows.map((r) => r[h].length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  console.log(line(headers));
  console.log(`|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`);
  for (const row of rows) console.log(line(headers.map((h) => row[h])));
}

export const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

/** The value at or above `p` % of `values` (nearest rank). */
export const percentile = (values: number[], p: number): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
};

export const ms = (value: number): string => `${value.toFixed(0)} ms`;

/**
 * The median of rounds' own ratios (platform / reference, measured back to back in each round) and
 * their range: a burst of load elsewhere falls on one round's pair, not on one series.
 */
export function pairedRatio(platform: number[], reference: number[]): string {
  const ratios = platform.map((value, round) => value / reference[round]!);
  return `${median(ratios).toFixed(2)}x (rounds ${Math.min(...ratios).toFixed(2)}-${Math.max(...ratios).toFixed(2)})`;
}

/** The machine's load average over 1, 5 and 15 minutes, printed beside figures measured on a shared machine. */
export const loadAverage = (): string => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

/**
 * A count given on a bench's command line (`text`, undefined when not given: `fallback`), a whole
 * number of at least 1; anything else stops the bench before it starts anything, naming `what`.
 */
export function countArgument(text: string | undefined, what: string, fallback: number): number {
  if (text === undefined) return fallback;
  const count = Number(text);
  if (!/^\d+$/.test(text) || count < 1) throw new Error(`${what} wants a whole number, 1 or more: ${text}`);
  return count;
}
