import { createHash } from 'node:crypto';
import acme from 'acme-client';
import type { Store } from '../../store/store.js';
import { acmeAccountKey } from '../../store/keys.js';

// One ACME account per directory for the whole cluster: its key is made by the first gateway that
// needs it and kept in the store, so every gateway orders as the same account (one set of rate
// limits, one contact) and an account is not made per gateway start.

interface AccountRecord {
  directoryUrl: string;
  /** PEM private key of the account. */
  key: string;
}

export async function accountKey(store: Store, directoryUrl: string): Promise<string> {
  const key = acmeAccountKey(createHash('sha256').update(directoryUrl).digest('hex').slice(0, 32));
  const existing = await store.get(key);
  if (existing) return (JSON.parse(existing.value) as AccountRecord).key;
  const record: AccountRecord = { directoryUrl, key: (await acme.crypto.createPrivateEcdsaKey('P-256')).toString() };
  if (await store.create(key, JSON.stringify(record))) return record.key;
  // Another gateway made it first: use that one.
  return (JSON.parse((await store.get(key))!.value) as AccountRecord).key;
}
