import { serviceKey } from '../keys.js';
import { createRecord, deleteRecord, readRecord, updateRecord, type Versioned } from '../json-records.js';
import type { CachedValue, PrefixCache } from '../prefix-cache.js';
import type { Compare, Store } from '../store.js';
import type { Service } from '../../schemas/service.js';

// The one owner of /platform/directory/services/<name>: the service declarations. Written only by
// the directory (src/roles/directory/routes.ts); the scheduler, the orchestrator and the
// certificates read them here, or from a watched copy of the prefix.

export const readService = (store: Store, name: string): Promise<Versioned<Service> | undefined> => readRecord<Service>(store, serviceKey(name));

/** Create-if-absent; the write's revision, 0 when the name is declared. */
export const createService = (store: Store, service: Service): Promise<number> => createRecord(store, serviceKey(service.name), service);

export const updateService = (store: Store, name: string, change: (service: Service) => Service): Promise<{ record: Service; revision: number } | undefined> =>
  updateRecord<Service>(store, serviceKey(name), change);

/** The revision of the deletion, 0 when the name was not declared. */
export const deleteService = (store: Store, name: string): Promise<number> => deleteRecord(store, serviceKey(name));

/** A transaction's check that no service of this name is declared. */
export const undeclared = (name: string): Compare => ({ key: serviceKey(name), target: 'version', equals: 0 });

/** A declaration in a watched copy of the prefix, with its revision for a transaction's compare. */
export const cachedDeclaration = (services: PrefixCache, name: string): CachedValue | undefined => services.get(serviceKey(name));
