import type { FastifyRequest } from 'fastify';
import { request as undiciRequest } from '../../http/undici-request.js';
import { HttpError } from '../../http/errors.js';
import type { Store } from '../../store/store.js';
import { passedOnAuthorization } from '../../auth/caller.js';
import { listMachines } from './cluster-view.js';

// `DELETE /services/:name?volumes=delete`: each registered machine's agent removes the named
// volumes its units of the service had. Volumes live on machines, not in the store, so only
// their agents can; one that does not answer fails the whole call (nothing is deleted that the
// caller was not told about), and the call can be repeated.

export async function removeVolumes(store: Store, request: FastifyRequest, service: string): Promise<void> {
  const machines = await listMachines(store);
  const authorization = passedOnAuthorization(request.headers);
  const failures = await Promise.all(
    machines.map(async (machine) => {
      try {
        const response = await undiciRequest(`http://${machine.address}/volumes/${encodeURIComponent(service)}`, {
          method: 'DELETE',
          headersTimeout: 60_000,
          headers: authorization === undefined ? {} : { authorization },
        });
        const body = (await response.body.json().catch(() => ({}))) as { message?: string };
        return response.statusCode === 200 ? undefined : `${machine.id}: ${body.message ?? `agent answered ${response.statusCode}`}`;
      } catch (error) {
        return `${machine.id}: agent at ${machine.address} is not answering (${(error as Error).message})`;
      }
    }),
  );
  const failed = failures.filter((failure): failure is string => failure !== undefined);
  if (failed.length > 0) throw new HttpError(502, `the units of ${service} are stopped, but its volumes could not all be removed, so it is still declared (repeat the call): ${failed.join('; ')}`);
}
