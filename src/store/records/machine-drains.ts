import { machineDrainKey } from '../keys.js';
import type { Compare, Store } from '../store.js';
import type { MachineDrain } from '../../schemas/cluster.js';

// The one owner of /platform/machine-drains/<id>: an operator's drain, set and cleared through the
// orchestrator (not leased, so it outlives agent restarts); the plan applier places nothing on a
// drained machine and checks that in the transaction that places.

export const setDrain = (store: Store, drain: MachineDrain): Promise<number> => store.put(machineDrainKey(drain.machine), JSON.stringify(drain));

export const clearDrain = (store: Store, machine: string): Promise<unknown> => store.delete(machineDrainKey(machine));

/** A transaction's check that `machine` has no drain. */
export const notDrained = (machine: string): Compare => ({ key: machineDrainKey(machine), target: 'version', equals: 0 });
