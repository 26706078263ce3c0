// A real etcd for one test file, the roles it names as `platform serve` processes on it (each with
// its own environment), and a store client of it: all stopped when the file's tests end.

import { startEtcd, type EtcdOptions, type EtcdProcess } from './etcd.js';
import { freePort } from './free-port.js';
import { serveRole, type PlatformProcess } from './platform.js';
import { EtcdStore } from '../../src/store/etcd-store.js';

type Role = PlatformProcess & { url: string };

export async function startRolesOnEtcd<Name extends string>(
  t: { teardown(fn: () => Promise<void>): void },
  environments: Record<Name, NodeJS.ProcessEnv>,
  etcdOptions: EtcdOptions = {},
): Promise<{ etcd: EtcdProcess; store: EtcdStore; roles: Record<Name, Role> }> {
  const etcd = await startEtcd(etcdOptions);
  const roles = {} as Record<Name, Role>;
  for (const [name, env] of Object.entries(environments) as [Name, NodeJS.ProcessEnv][]) {
    roles[name] = await serveRole(name, await freePort(), ['--etcd', etcd.url], env);
  }
  const store = new EtcdStore([etcd.url]);
  t.teardown(async () => {
    await store.close();
    await Promise.all(Object.values<Role>(roles).map((role) => role.stop()));
    await etcd.stop();
  });
  return { etcd, store, roles };
}
