import { randomBytes } from 'node:crypto';
import type { Store } from '../store/store.js';
import { sessionKeyKey } from '../store/keys.js';

// The key dashboard sessions are signed with (src/auth/session.ts). The first process that needs
// it writes a random one, once (of racing writers one wins and all read its key); every role of
// every machine reads the same key, so any of them can check any session.

export async function loadSessionKey(store: Store): Promise<Buffer> {
  await store.txn([{ key: sessionKeyKey, target: 'createRevision', equals: 0 }], [{ op: 'put', key: sessionKeyKey, value: randomBytes(32).toString('base64url') }]);
  const stored = await store.get(sessionKeyKey);
  if (!stored) throw new Error(`the session key ${sessionKeyKey} vanished as it was written`);
  return Buffer.from(stored.value, 'base64url');
}
