import { Readable, type Writable } from 'node:stream';
import { Type } from '@sinclair/typebox';
import type Docker from 'dockerode';
import type { RoleServer } from '../../http/server.js';
import { HttpError, notFound, unavailable } from '../../http/errors.js';
import { UnitStatus } from '../../schemas/cluster.js';
import { NameParams, UnitName, errorResponses, textResponse } from '../../schemas/common.js';
import { RemovedVolumes } from '../../schemas/service.js';
import { findUnitContainer, removeServiceVolumes } from './containers.js';
import { dockerErrorMessage } from './docker-client.js';
import { MAX_LOG_TAILS, StreamLimit } from '../../http/stream-limit.js';
import { followedWhileCredentialsLast } from '../../auth/credential-lifetime.js';
import { RotationDedup } from './log-rotation-dedup.js';
import { demultiplexInto, followLog } from './log-follower.js';
import { JOB_STDIN_SECRET_HEADER, JOB_STDIN_TYPE } from '../../schemas/job.js';
import { feedStdin } from './job-stdin.js';

// The agent's own API: what runs on this machine and the units' logs. The orchestrator proxies
// these for people; the store holds the same statuses for everyone else.

export interface AgentRouteTarget {
  readonly machineId: string;
  readonly docker: Docker;
  statuses(): UnitStatus[];
  /** The stdin of this machine's job `id`, for the caller that shows its secret (src/roles/agent/job-runner.ts). */
  jobStdin(id: string, secret: string): Promise<Writable>;
}

const JobIdParams = Type.Object({ id: Type.String({ pattern: '^[a-z0-9-]{1,64}$', description: 'a job id' }) });

const LogParams = Type.Object({ unit: UnitName });
const LogQuery = Type.Object({
  tail: Type.Integer({ minimum: 0, maximum: 100_000, default: 100, description: 'lines from the end of the log' }),
  follow: Type.Boolean({ default: false, description: 'keep streaming new lines until the client disconnects' }),
});

/** Docker failures answer 503 naming the engine; HTTP errors pass through. */
async function viaDocker<T>(action: () => Promise<T>): Promise<T> {
  try {
    return await action();
  } catch (error) {
    if (error instanceof HttpError) throw error;
    throw unavailable(`Docker engine unreachable: ${dockerErrorMessage(error)}`);
  }
}

export function registerAgentRoutes(server: RoleServer, agent: AgentRouteTarget): void {
  const tails = new StreamLimit('followed log tails', MAX_LOG_TAILS);
  server.delete(
    '/volumes/:name',
    {
      schema: {
        description: "Removes the named volumes this machine's units of a service had, once its containers are gone (the orchestrator calls it for `DELETE /services/:name?volumes=delete`).",
        params: NameParams,
        response: { 200: RemovedVolumes, ...errorResponses },
      },
    },
    async (request) => ({ machine: agent.machineId, removed: await viaDocker(() => removeServiceVolumes(agent.docker, agent.machineId, request.params.name)) }),
  );

  server.get(
    '/units',
    { schema: { description: "This machine's unit statuses.", response: { 200: Type.Array(UnitStatus) } } },
    async () => agent.statuses(),
  );

  server.get(
    '/units/:unit/logs',
    {
      schema: {
        description: "A unit's container output (stdout and stderr) as text.",
        params: LogParams,
        querystring: LogQuery,
        response: { 200: textResponse('text/plain', 'The output, stdout and stderr interleaved; with `follow`, streamed as it comes.'), ...errorResponses },
      },
    },
    async (request, reply) => {
      const { unit } = request.params;
      const { tail, follow } = request.query;
      if (follow) tails.admit(reply);
      const container = await viaDocker(() => findUnitContainer(agent.docker, agent.machineId, unit));
      if (!container) throw notFound(`unit ${unit} has no container on machine ${agent.machineId}`);
      const handle = agent.docker.getContainer(container.id);
      reply.type('text/plain; charset=utf-8');
      if (!follow) {
        const output = await viaDocker(() => handle.logs({ stdout: true, stderr: true, tail, follow: false, timestamps: true }));
        const text = new RotationDedup();
        demultiplexInto(agent.docker, Readable.from([output]), text);
        return reply.send(text);
      }
      const first = await viaDocker(() => handle.logs({ stdout: true, stderr: true, tail, follow: true, timestamps: true }));
      const followed = followLog(agent.docker, handle, first);
      // A followed log never ends by itself: stop reading from Docker when the client goes away.
      reply.raw.once('close', () => followed.close());
      return reply.send(followedWhileCredentialsLast(request, reply, followed.text));
    },
  );

  server.register(async (scope: RoleServer) => {
    // The body is the job's stdin, passed on as it comes: never parsed, never bounded by the body limit.
    scope.addContentTypeParser(JOB_STDIN_TYPE, (_request, body, done) => done(null, body));
    scope.put(
      '/jobs/:id/stdin',
      {
        schema: {
          description:
            "Passes the body on to the stdin of this machine's job, as it comes, and closes that stdin when the body ends. The orchestrator calls it for " +
            '`PUT /services/:name/jobs/:id/stdin`, showing the job\'s stdin secret, which only readers of the store know: no token opens it, so a unit cannot.',
          params: JobIdParams,
          response: { 204: Type.Null(), ...errorResponses },
        },
        config: { access: 'open' },
      },
      async (request, reply) => {
        const secret = request.headers[JOB_STDIN_SECRET_HEADER];
        if (typeof secret !== 'string') throw new HttpError(401, `the stdin of job ${request.params.id} needs the ${JOB_STDIN_SECRET_HEADER} header`);
        if (request.headers['content-type'] !== JOB_STDIN_TYPE) throw new HttpError(415, `the stdin of a job is sent as ${JOB_STDIN_TYPE}`);
        const stdin = await agent.jobStdin(request.params.id, secret);
        // An empty body is parsed by no parser: the stdin is closed at once.
        await feedStdin((request.body as Readable | undefined) ?? Readable.from([]), stdin);
        return reply.status(204).send(null);
      },
    );
  });
}
