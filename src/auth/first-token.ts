import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Store } from '../store/store.js';
import { bootstrapToken } from './tokens.js';
import { writeFileDurably } from '../atomic-file.js';

// `platform up` on a fresh store makes the first admin token and leaves it in a file only its
// owner can read, so the secret never reaches a terminal's scrollback or a log.

export const FIRST_TOKEN_FILE = 'admin-token';

/** The path of the file written, or undefined when tokens were issued before. */
export async function bootstrapIntoFile(store: Store, dataDir: string): Promise<string | undefined> {
  const issued = await bootstrapToken(store);
  if (!issued) return undefined;
  await mkdir(dataDir, { recursive: true });
  const path = join(dataDir, FIRST_TOKEN_FILE);
  // A new file made 0600 from its first byte, then moved into place: a file an earlier store left
  // (perhaps readable by others) is replaced, never written into.
  await writeFileDurably(path, `${issued.secret}\n`, { mode: 0o600 });
  return path;
}
