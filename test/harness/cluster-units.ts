import { http } from './platform.js';
import { waitFor } from './wait.js';

// What tests of a running cluster ask the orchestrator again and again: a service's units, and
// waiting for them to run or for a deployment to end.

export interface ListedUnit {
  unit: string;
  instance: number;
  machine: string;
  release: number;
  active: string;
  sub: string;
  restarts: number;
  address?: string;
  error?: string;
  errorKind?: string;
}

export const isRunning = (u: ListedUnit): boolean => u.active === 'active' && u.sub === 'running';

/** Calls on one orchestrator at `url`. */
export function clusterUnits(url: string) {
  const unitsOf = async (service: string): Promise<ListedUnit[]> => (await http('GET', `${url}/services/${service}/units`)).body;
  return {
    unitsOf,
    /** Waits for `count` running units of the service (all of `release`, when given). */
    settled: (service: string, count: number, release?: number): Promise<ListedUnit[]> =>
      waitFor(async () => {
        const units = await unitsOf(service);
        return units.length === count && units.every(isRunning) && (release === undefined || units.every((u) => u.release === release)) ? units : undefined;
      }, 60_000, { what: `${count} running units of ${service}` }),
    /** Waits for the deployment to end and returns it. */
    finished: (id: string): Promise<{ id: string; state: string; reason?: string }> =>
      waitFor(async () => {
        const deployment = (await http('GET', `${url}/deployments/${id}`)).body;
        return ['succeeded', 'failed', 'reverted', 'superseded'].includes(deployment.state) ? deployment : undefined;
      }, 90_000, { what: `deployment ${id}` }),
  };
}
