import type { RoleContext, StartedRole } from '../role.js';

/** The gateway role: Host-header load balancer (issue 6). Not built yet. */
export async function startGateway(_context: RoleContext): Promise<StartedRole> {
  throw new Error('the gateway role is not available yet');
}
