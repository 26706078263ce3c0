import { componentKey, type Component } from '../keys.js';
import type { Store } from '../store.js';

// The one owner of /platform/services/<component>: where a role answers, `host:port` (fixed by the
// specification), under the announcing process's lease. Written by the process that runs the role
// (src/roles/launch.ts), by the leading scheduler in its leader transaction (leadership.ts), or by
// a role's `platform announce` sidekick (src/announce-sidekick.ts); read by peers (src/http/peer-client.ts).

export const announcementEntry = (component: Component, address: string): { key: string; value: string } => ({ key: componentKey(component), value: address });

/** Where a component is announced (`address` undefined when it is not), and under which key. */
export async function readAnnouncement(store: Store, component: Component): Promise<{ key: string; address: string | undefined }> {
  const key = componentKey(component);
  return { key, address: (await store.get(key))?.value };
}
