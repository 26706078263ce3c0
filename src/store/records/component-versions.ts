import { componentVersionKey, componentVersionPrefix } from '../keys.js';
import { listRecords } from '../json-records.js';
import type { Store } from '../store.js';
import type { ComponentVersion } from '../../schemas/component.js';

// The one owner of /platform/components/: what each running role of each process is and which
// version it runs. Written once per role at start under the process's announcement lease
// (src/roles/launch.ts), so a stopped process's records go with its lease; read by `platform version`.

export const componentVersionEntry = (record: ComponentVersion): { key: string; value: string } => ({
  key: componentVersionKey(record.role, `${record.machine}@${record.address}`),
  value: JSON.stringify(record),
});

export async function listComponentVersions(store: Store): Promise<ComponentVersion[]> {
  const records = await listRecords<ComponentVersion>(store, componentVersionPrefix);
  return records.sort((a, b) => a.role.localeCompare(b.role) || a.machine.localeCompare(b.machine) || a.address.localeCompare(b.address));
}
