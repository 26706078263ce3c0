import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Polls `predicate` until it returns a truthy value and returns that value, or throws after
 * `timeoutMs`. Tests wait on observable state with a bound instead of sleeping a guessed time.
 * A predicate that throws counts as "not yet" (the store may be briefly unreachable).
 */
export async function waitFor<T>(
  predicate: () => T | Promise<T>,
  timeoutMs = 5000,
  { intervalMs = 50, what = 'condition' }: { intervalMs?: number; what?: string } = {},
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await predicate();
      if (value) return value as NonNullable<T>;
    } catch (error) {
      lastError = error;
    }
    if (Date.now() >= deadline) {
      const detail = lastError instanceof Error ? ` (last error: ${lastError.message})` : '';
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${detail}`);
    }
    await sleep(intervalMs);
  }
}
