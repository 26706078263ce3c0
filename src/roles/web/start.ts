import type { RoleContext, StartedRole } from '../role.js';

/** The standalone dashboard role (issue 7). Not built yet. */
export async function startWeb(_context: RoleContext): Promise<StartedRole> {
  throw new Error('the web role is not available yet');
}
