import { machineAwayKey, machineKey } from '../keys.js';
import { readRecord, type Versioned } from '../json-records.js';
import type { Store } from '../store.js';
import type { Machine, MachineAway } from '../../schemas/cluster.js';

// The one owner of /platform/machines/<id> and /platform/machines-away/<id>. An agent registers its
// machine under its lease (src/roles/agent/machine-registration.ts), so a dead machine's record
// vanishes on its own; the away record is not leased: written when the agent stops on purpose and
// deleted once the machine is registered again.

/** What leased writes need: the agent's LeasedKeys. */
interface LeasedSetter {
  set(key: string, value: string): Promise<unknown>;
}

export const registerMachine = (keys: LeasedSetter, machine: Machine): Promise<unknown> => keys.set(machineKey(machine.id), JSON.stringify(machine));

export const readMachine = (store: Store, id: string): Promise<Versioned<Machine> | undefined> => readRecord<Machine>(store, machineKey(id));

export const markAway = (store: Pick<Store, 'put'>, away: MachineAway): Promise<number> => store.put(machineAwayKey(away.machine), JSON.stringify(away));

export const clearAway = (store: Pick<Store, 'delete'>, machine: string): Promise<boolean> => store.delete(machineAwayKey(machine));
