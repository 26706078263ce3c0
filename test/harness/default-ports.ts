import { open, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// `platform up` and the specification's layout listen on fixed ports (9000-9004, 8080), so the
// test files that run them (deploy-e2e, restarts) take turns: tap runs two files at once, and two
// of these side by side would each reach the other's roles. One lock file for the machine, holding
// its owner's pid, so a holder that died without releasing it does not block the next forever.

const LOCK = join(tmpdir(), 'platform-test-default-ports.lock');
const POLL_MS = 250;

/** Whether a process of that pid exists (a lock holder that died leaves its pid behind). */
export const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** Waits until no other test process holds the default ports, takes them, and returns the release. */
export async function holdDefaultPorts(timeoutMs = 15 * 60_000): Promise<() => Promise<void>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const file = await open(LOCK, 'wx');
      await file.writeFile(String(process.pid));
      await file.close();
      return () => rm(LOCK, { force: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const holder = Number(await readFile(LOCK, 'utf8').catch(() => ''));
    // A holder that died, or one caught between creating the file and writing its pid (0), is looked at again.
    if (holder > 0 && !alive(holder)) await rm(LOCK, { force: true });
    if (Date.now() > deadline) throw new Error(`the default ports stayed held by process ${holder} (${LOCK}) for ${timeoutMs / 1000} s`);
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}
