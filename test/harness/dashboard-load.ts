import type { Store, Operation } from '../../src/store/store.js';
import { assignmentKey, machineKey, unitStatusKey } from '../../src/store/keys.js';
import { http } from './platform.js';

// The dashboard's load case: many services declared through the API and their units written into
// the store as the scheduler (assignments) and agents (statuses) would write them, since starting
// 1,000 containers is beyond a 2-core test machine. Nothing acts on those units: no scheduler
// runs beside them. Used by the browser test and bench/dashboard.ts.

export const loadServiceNames = (count: number): string[] => Array.from({ length: count }, (_, i) => `load-${String(i).padStart(3, '0')}`);

/** Declares the services (20 calls at a time), each of `units` units, through the orchestrator. */
export async function declareLoadServices(orchestratorUrl: string, registryHost: string, names: readonly string[], units: number): Promise<void> {
  for (let i = 0; i < names.length; i += 20) {
    await Promise.all(
      names.slice(i, i + 20).map(async (name) => {
        const created = await http('POST', `${orchestratorUrl}/services`, { name, description: `load ${name}`, containerRepository: `${registryHost}/load/${name}`, numInstances: units, loadBalanced: true, publicFacing: false });
        if (created.status !== 201) throw new Error(`declaring ${name}: ${JSON.stringify(created.body)}`);
      }),
    );
  }
}

export interface LoadUnit {
  machine: string;
  slot: string;
  assignment: Record<string, unknown>;
  status: Record<string, unknown>;
}

/** Instance `instance` of `name`, on machine `instance % machines.length`, in the given state. */
export function loadUnit(registryHost: string, machines: readonly string[], name: string, instance: number, active: string, sub: string, now = new Date().toISOString()): LoadUnit {
  const machine = machines[instance % machines.length]!;
  const unit = `${name}-${instance}.service`;
  const record = { unit, service: name, instance, machine, release: 1, spec: 'perf', image: `${registryHost}/load/${name}@sha256:${'0'.repeat(64)}`, ports: [], env: {}, stopGraceSeconds: 10, deployment: 'perf', assignedAt: now };
  return { machine, slot: `${unit}@perf`, assignment: record, status: { ...record, active, sub, address: `127.0.0.1:${20000 + instance}`, restarts: 0, updatedAt: now } };
}

/**
 * Registers `registered` machines and writes `units` running units of every service, in
 * transactions of 100 writes; machines named but not registered hold units too (lost machines).
 */
export async function writeLoadUnits(store: Store, registryHost: string, names: readonly string[], units: number, machines: readonly string[], registered = machines.length): Promise<void> {
  const now = new Date().toISOString();
  const writes: Operation[] = [];
  for (const machine of machines.slice(0, registered)) {
    writes.push({ op: 'put', key: machineKey(machine), value: JSON.stringify({ id: machine, address: '127.0.0.1:1', host: '127.0.0.1', labels: {}, network: 'host', docker: { reachable: true, version: 'perf' }, capacity: { units: 1000 }, unitCount: 250, startedAt: now, updatedAt: now }) });
  }
  for (const name of names) {
    for (let instance = 1; instance <= units; instance++) {
      const unit = loadUnit(registryHost, machines, name, instance, 'active', 'running', now);
      writes.push({ op: 'put', key: assignmentKey(unit.machine, unit.slot), value: JSON.stringify(unit.assignment) });
      writes.push({ op: 'put', key: unitStatusKey(unit.machine, unit.slot), value: JSON.stringify(unit.status) });
    }
  }
  for (let i = 0; i < writes.length; i += 100) await store.txn([], writes.slice(i, i + 100));
}
