import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EmbeddedStore } from '../../src/store/embedded-store.js';

/** An embedded store in a directory of its own, closed and removed when the test `t` ends. */
export async function temporaryStore(t: { teardown(fn: () => unknown): void }, name: string): Promise<EmbeddedStore> {
  const dir = mkdtempSync(join(tmpdir(), `${name}-`));
  const store = await EmbeddedStore.open(dir);
  t.teardown(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return store;
}
