import { trace } from '../../trace.js';
import { Type } from '@sinclair/typebox';
import type { RoleServer } from '../../http/server.js';
import { badRequest, conflict, notFound, unavailable } from '../../http/errors.js';
import { DEFAULT_JOB_SECONDS, getJobSchema, jobDurationSeconds, jobView, listJobsSchema, startJobSchema, stopJobSchema } from '../../schemas/job.js';
import { listJobViews, readJobRun } from '../../store/records/jobs.js';
import { ErrorReply, NameParams, errorResponses, writeRefusals } from '../../schemas/common.js';
import {
  DeployReply,
  DeployRequest,
  Release,
  VersionParams,
  getDeploymentSchema,
  journalSchema,
  listDeploymentsSchema,
  rollbackSchema,
  versionNumber,
} from '../../schemas/release.js';
import type { Scheduler } from './scheduler.js';
import { getRelease, listReleases } from '../../store/records/releases.js';
import { getDeployment, listDeployments } from '../../store/records/deployments.js';
import { readService } from '../../store/records/services.js';
import type { Service } from '../../schemas/service.js';
import { triggerTime } from './deploys/deploy.js';
import { readJournal } from '../../store/records/journal.js';
import { serviceTagsSchema } from '../../schemas/registry.js';
import { withConfigFor } from '../../auth/env-redaction.js';
import { callerName, callerToken } from '../../auth/guard.js';
import type { FastifyRequest } from 'fastify';
import type { WriteLimits } from '../../auth/write-budget.js';

export function schedulerRoutes(server: RoleServer, scheduler: Scheduler, limits: WriteLimits): void {
  const { store } = scheduler;
  /**
   * A deploy or rollback writes a release (a copy of the config), a deployment and an assignment
   * per unit (each with the env): charged to the caller's budget as the config's size once per unit
   * and once more. Local callers have no budget, and are spared the read.
   */
  const admitDeploy = async (request: FastifyRequest, name: string): Promise<void> => {
    await limits.space.assertRoom();
    if (!callerToken(request)) return;
    const config = (await readService(store, name))?.record.config;
    if (config) limits.budget.charge(request, Buffer.byteLength(JSON.stringify(config)) * (config.numInstances + 1));
  };
  /** The release a job runs: the one asked for, else the one the service runs now. */
  const jobRelease = async (service: Service, asked: string | undefined): Promise<Release> => {
    if (asked !== undefined) {
      const release = await getRelease(store, service, versionNumber(asked));
      if (!release) throw notFound(`service ${service.name} has no release ${asked}`);
      return release;
    }
    const running = (await listDeployments(store, service.name)).find((deployment) => deployment.state === 'succeeded' && deployment.trigger !== 'stop');
    const release = running && (await getRelease(store, service, running.release));
    if (!release) throw conflict(`service ${service.name} runs no release yet: deploy it first, or name one with release`);
    return release;
  };
  /** Releases are the declaration's own: a deleted predecessor's are not shown. */
  const declared = async (name: string): Promise<Service> => {
    const found = await readService(store, name);
    if (!found) throw notFound(`service ${name} is not declared`);
    return found.record;
  };

  server.post(
    '/hooks/deploy',
    {
      schema: {
        description: 'Deploy a declared service: pin the image to its digest, record a release, roll it out.',
        body: DeployRequest,
        response: { 200: DeployReply, ...errorResponses, ...writeRefusals },
      },
      config: { access: 'deploy', service: { body: 'serviceName' } },
    },
    async (request) => {
      trace('scheduler.hook', request.body.serviceName);
      await admitDeploy(request, request.body.serviceName);
      const reply = await scheduler.deploy({ ...request.body, triggeredAt: triggerTime(request.body.pushedAt), trigger: 'manual' });
      trace('scheduler.accepted', request.body.serviceName);
      return reply;
    },
  );

  server.post(
    '/services/:name/rollback',
    { schema: { ...rollbackSchema, params: NameParams }, config: { access: 'deploy', service: { param: 'name' } } },
    async (request) => {
      await admitDeploy(request, request.params.name);
      return scheduler.rollback(request.params.name, versionNumber(request.body.version), request.body.runReleaseCommand === true);
    },
  );

  server.post(
    '/services/:name/jobs',
    { schema: startJobSchema, config: { access: 'deploy', service: { param: 'name' } } },
    async (request, reply) => {
      const { name } = request.params;
      const { command, machine, timeout, stdin } = request.body;
      await limits.space.assertRoom();
      const release = await jobRelease(await declared(name), request.body.release);
      const timeoutSeconds = timeout === undefined ? DEFAULT_JOB_SECONDS : jobDurationSeconds(timeout);
      if (timeoutSeconds === undefined) throw badRequest(`timeout must be at most 24h, got ${timeout}`);
      const job = await scheduler.startJob({ kind: 'run', release, command, timeoutSeconds, machine, stdin, caller: callerName(request) });
      return reply.status(201).send(jobView(job, undefined));
    },
  );

  server.get('/jobs', { schema: listJobsSchema }, async (request) => listJobViews(store, request.query.service));

  server.get('/services/:name/jobs/:id', { schema: getJobSchema }, async (request) => {
    const { name, id } = request.params;
    const found = (await listJobViews(store, name)).find((job) => job.id === id);
    if (!found) throw notFound(`service ${name} has no job ${id}`);
    return found;
  });

  server.delete(
    '/services/:name/jobs/:id',
    { schema: stopJobSchema, config: { access: 'deploy', service: { param: 'name' } } },
    async (request) => {
      const { name, id } = request.params;
      const job = await scheduler.stopJob(name, id);
      return jobView(job, await readJobRun(store, id));
    },
  );

  server.get(
    '/services/:name/releases',
    { schema: { params: NameParams, response: { 200: Type.Array(Release), ...errorResponses } } },
    async (request) => (await listReleases(store, await declared(request.params.name))).map((release) => withConfigFor(request, release.service, release)),
  );

  server.get(
    '/services/:name/releases/:version',
    { schema: { params: VersionParams, response: { 200: Release, ...errorResponses } } },
    async (request) => {
      const version = Number(request.params.version.replace(/^v/, ''));
      const release = await getRelease(store, await declared(request.params.name), version);
      if (!release) throw notFound(`service ${request.params.name} has no release v${version}`);
      return withConfigFor(request, release.service, release);
    },
  );

  server.get('/services/:name/tags', { schema: serviceTagsSchema }, async (request) => scheduler.tagsOf(await declared(request.params.name)));

  server.delete(
    '/services/:name/units',
    {
      schema: {
        description: 'Stop every unit of the service and wait until they are gone.',
        params: NameParams,
        response: { 204: Type.Null(), 503: ErrorReply },
      },
      config: { access: 'admin' },
    },
    async (request, reply) => {
      const remaining = await scheduler.stopService(request.params.name);
      if (remaining.length > 0) throw unavailable(`units of ${request.params.name} did not stop in time: ${remaining.join(', ')}`);
      return reply.status(204).send(null);
    },
  );

  server.get(
    '/deployments',
    { schema: listDeploymentsSchema },
    async (request) => listDeployments(store, request.query.service),
  );

  server.get(
    '/deployments/:id',
    { schema: getDeploymentSchema },
    async (request) => {
      const deployment = await getDeployment(store, request.params.id);
      if (!deployment) throw notFound(`deployment ${request.params.id} does not exist`);
      return deployment;
    },
  );

  server.get(
    '/journal',
    { schema: journalSchema },
    async (request) => readJournal(store, request.query),
  );
}
