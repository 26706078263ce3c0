import type { Store } from '../store/store.js';
import { registryCredentialKey, registryCredentialPrefix } from '../store/keys.js';
import type { RegistryLogin } from '../schemas/registry.js';

// Every read and write of a registry login. The password is stored as given, since the scheduler
// and the agents must send it to the registry; it leaves this module only through `credentialFor`,
// whose callers send it to that registry and nowhere else (no reply, log or journal line).

export interface RegistryCredential {
  username: string;
  password: string;
}

/** How the scheduler and the agents find the login of a registry host. */
export type CredentialLookup = (registry: string) => Promise<RegistryCredential | undefined>;

type CredentialRecord = RegistryLogin & RegistryCredential;

/** Stores (or replaces) the login of `host`; returns it as listed. */
export async function saveRegistryLogin(store: Store, host: string, credential: RegistryCredential, now = Date.now()): Promise<RegistryLogin> {
  const record: CredentialRecord = { host, username: credential.username, password: credential.password, addedAt: new Date(now).toISOString() };
  await store.put(registryCredentialKey(host), JSON.stringify(record));
  return listed(record);
}

/** Every login, without its password. */
export async function listRegistryLogins(store: Store): Promise<RegistryLogin[]> {
  const records = await store.list(registryCredentialPrefix);
  return records.map((kv) => listed(JSON.parse(kv.value) as CredentialRecord));
}

/** Deletes the login of `host`; false when there was none. */
export async function removeRegistryLogin(store: Store, host: string): Promise<boolean> {
  const result = await store.txn([{ key: registryCredentialKey(host), target: 'version', equals: 0 }], [], [{ op: 'delete', key: registryCredentialKey(host) }]);
  return !result.succeeded;
}

/** The credential to send to `host`, if an admin logged in to it. */
export async function credentialFor(store: Store, host: string): Promise<RegistryCredential | undefined> {
  const kv = await store.get(registryCredentialKey(host));
  if (!kv) return undefined;
  const { username, password } = JSON.parse(kv.value) as CredentialRecord;
  return { username, password };
}

const listed = ({ host, username, addedAt }: CredentialRecord): RegistryLogin => ({ host, username, addedAt });
