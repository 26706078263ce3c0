import type { Readable } from 'node:stream';
import type { RoleServer } from '../../http/server.js';
import { request as undiciRequest } from '../../http/undici-request.js';
import { HttpError, conflict, notFound, unavailable } from '../../http/errors.js';
import type { Store } from '../../store/store.js';
import { readJob } from '../../store/records/jobs.js';
import { readMachine } from '../../store/records/machines.js';
import { apiRoute } from '../../schemas/api.js';
import { JOB_STDIN_SECRET_HEADER, JOB_STDIN_TYPE } from '../../schemas/job.js';

// `PUT /services/:name/jobs/:id/stdin` (docs/jobs.md "stdin"): the caller's bytes, streamed to the
// agent of the job's machine, which passes them on to the container's stdin. The caller needs a
// deploy token for the service, checked here; the agent opens the job's stdin only to the one who
// shows its secret, which is in the job's record: only readers of the store, never a unit.

export function jobStdinRoute(server: RoleServer, store: Store): void {
  server.register(async (scope: RoleServer) => {
    // The body is passed on as it comes: never parsed, never bounded (a console may last hours).
    scope.addContentTypeParser(JOB_STDIN_TYPE, (_request, body, done) => done(null, body));
    scope.route({
      ...apiRoute('PUT /services/:name/jobs/:id/stdin'),
      handler: async (request, reply) => {
        const { name, id } = request.params;
        if (request.headers['content-type'] !== JOB_STDIN_TYPE) throw new HttpError(415, `the stdin of a job is sent as ${JOB_STDIN_TYPE}`);
        const job = await readJob(store, id);
        if (!job || job.service !== name) throw notFound(`service ${name} has no job ${id}`);
        if (!job.stdinSecret) throw conflict(`job ${id} was not started with stdin (start it with "stdin": true, platform run -i)`);
        const machine = await readMachine(store, job.machine);
        if (!machine) throw unavailable(`machine ${job.machine} of job ${id} is not registered (its agent is down)`);
        let response;
        try {
          response = await undiciRequest(`http://${machine.record.address}/jobs/${id}/stdin`, {
            method: 'PUT',
            body: request.body as Readable,
            headers: { 'content-type': JOB_STDIN_TYPE, [JOB_STDIN_SECRET_HEADER]: job.stdinSecret },
            // The agent answers when the stdin is closed: as late as the caller likes.
            headersTimeout: 0,
            bodyTimeout: 0,
          });
        } catch (error) {
          throw unavailable(`agent of machine ${job.machine} at ${machine.record.address} is not answering: ${(error as Error).message}`);
        }
        if (response.statusCode !== 204) {
          const body = (await response.body.json().catch(() => ({}))) as { message?: string };
          throw new HttpError(response.statusCode >= 500 ? 502 : response.statusCode, body.message ?? `agent answered ${response.statusCode}`);
        }
        await response.body.dump();
        return reply.status(204).send(null);
      },
    });
  });
}
