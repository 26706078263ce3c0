import { createServer } from 'node:net';
import type { Assignment } from '../../schemas/cluster.js';
import { PLATFORM_PORTS } from '../../schemas/service.js';
import { defaultContainerPort, type NetworkMode } from './container-spec.js';

// The port a unit listens on. Host networking shares the machine's port space, so the agent picks
// a free host port per unit (or the one the service fixed); bridge networking gives each
// container its own, and Docker publishes it.

export interface UnitPorts {
  /** The unit's `PORT`. */
  port: number;
  /** Bridge mode: the host port to publish on, when the service fixed one. */
  hostPort?: number;
}

/** A port no process listened on a moment ago: bind port 0, read it, release it. */
export function freeHostPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen({ port: 0, exclusive: true }, () => {
      const address = server.address();
      server.close(() => (address && typeof address === 'object' ? resolve(address.port) : reject(new Error('no port bound'))));
    });
  });
}

/**
 * Chooses the unit's ports. `platformPorts` (besides PLATFORM_PORTS) are never chosen: a role that
 * is restarting leaves its port free for a moment, and a unit must not take it. `taken` holds the host ports this agent's units use (the kernel may
 * hand a just-released port out again; during a rolling update the old container of the unit
 * still holds its port); the chosen host port is added to it before returning, so units choosing
 * concurrently never pick the same one.
 */
export async function chooseUnitPorts(assignment: Assignment, network: NetworkMode, taken: Set<number>, platformPorts: readonly number[] = []): Promise<UnitPorts> {
  const mapping = assignment.ports[0];
  if (network === 'bridge') {
    return { port: mapping?.container ?? defaultContainerPort, ...(mapping?.host ? { hostPort: mapping.host } : {}) };
  }
  if (mapping?.host) return { port: mapping.host };
  for (let attempt = 0; attempt < 20; attempt += 1) {
    const port = await freeHostPort();
    if (!taken.has(port) && !PLATFORM_PORTS.includes(port) && !platformPorts.includes(port)) {
      taken.add(port);
      return { port };
    }
  }
  throw new Error('could not find a free host port');
}
