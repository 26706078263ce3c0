import { lastSegment, unitOutputKey, unitOutputPrefix, unitOutputRoot } from '../keys.js';
import { readRecord } from '../json-records.js';
import type { Store } from '../store.js';
import { undeclared } from './services.js';
import type { UnitOutput } from '../../schemas/unit-output.js';

// The one owner of /platform/unit-output/<service>/<instance>: the last output of each unit
// instance's newest failed container. Written by the agent that ran it (not leased: the output
// outlives the container, the deployment's revert and the agent), read by the orchestrator
// (`platform logs NAME N --previous`), deleted by the leading scheduler's housekeeping once the
// service is no longer declared. One record per instance, each bounded (KEPT_OUTPUT_LINES/BYTES).

/** Keeps `output` as its instance's newest failure, replacing the one before. */
export async function keepUnitOutput(store: Store, output: UnitOutput): Promise<void> {
  await store.put(unitOutputKey(output.service, output.instance), JSON.stringify(output));
}

export async function readUnitOutput(store: Store, service: string, instance: number): Promise<UnitOutput | undefined> {
  return (await readRecord<UnitOutput>(store, unitOutputKey(service, instance)))?.record;
}

/** The services that have output kept, by name. */
export async function servicesWithUnitOutput(store: Store): Promise<Set<string>> {
  const keys = (await store.list(unitOutputRoot)).map((kv) => kv.key);
  return new Set(keys.map((key) => lastSegment(key.slice(0, key.lastIndexOf('/')))));
}

/** Deletes every kept output of `name` while no service of that name is declared; false when one is. */
export async function deleteUndeclaredUnitOutputs(store: Store, name: string): Promise<boolean> {
  return (await store.txn([undeclared(name)], [{ op: 'deletePrefix', prefix: unitOutputPrefix(name) }])).succeeded;
}
