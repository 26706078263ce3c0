// Durations as people type them (`90d`, `12h`, `1w2d`) → milliseconds. The API's Duration schema
// admits only this shape; this is what it means.

const unitMs: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/** Ten years: a longer expiry is a typing mistake, not a policy. */
export const MAX_DURATION_MS = 3650 * unitMs.d!;

export class DurationError extends Error {
  override name = 'DurationError';
}

export function parseDuration(text: string): number {
  if (!/^(\d+[smhdw])+$/.test(text)) throw new DurationError(`a duration is a number and a unit (s, m, h, d, w), such as 90d or 1w2d, got ${JSON.stringify(text)}`);
  let total = 0;
  for (const [, amount, unit] of text.matchAll(/(\d+)([smhdw])/g)) total += Number(amount) * unitMs[unit!]!;
  if (total <= 0) throw new DurationError(`a duration must be longer than zero, got ${text}`);
  if (total > MAX_DURATION_MS) throw new DurationError(`a duration may be at most 3650d, got ${text}`);
  return total;
}
