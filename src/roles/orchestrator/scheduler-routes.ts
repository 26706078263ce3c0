import { Readable } from 'node:stream';
import { Type } from '@sinclair/typebox';
import { request as undiciRequest } from 'undici';
import type { RoleServer } from '../../http/server.js';
import type { PeerClient } from '../../http/peer-client.js';
import { HttpError, notFound, unavailable } from '../../http/errors.js';
import type { Store } from '../../store/store.js';
import { machineKey } from '../../store/keys.js';
import { readRecord } from '../../store/json-records.js';
import { NameParams, ServiceName, UnitName, errorResponses } from '../../schemas/common.js';
import { Deployment, DeployReply, JournalEntry, getDeploymentSchema, journalSchema, listDeploymentsSchema, rollbackSchema } from '../../schemas/release.js';
import type { Machine } from '../../schemas/cluster.js';
import { listClusterUnits } from './cluster-view.js';

// The orchestrator's view of deployments, the journal, rollbacks and unit logs: forwarded to the
// scheduler, or to the agent of the machine a unit runs on.

const LogParams = Type.Object({ name: ServiceName, unit: UnitName });

const query = (values: Record<string, unknown>): string => {
  const entries = Object.entries(values).filter(([, value]) => value !== undefined);
  return entries.length ? `?${new URLSearchParams(entries.map(([k, v]): [string, string] => [k, String(v)])).toString()}` : '';
};

export function schedulerViewRoutes(server: RoleServer, store: Store, scheduler: PeerClient): void {
  server.get(
    '/deployments',
    { schema: listDeploymentsSchema },
    async (request) => (await scheduler.actingFor(request).call<Deployment[]>('GET', `/deployments${query(request.query)}`)).body,
  );

  server.get('/deployments/:id', { schema: getDeploymentSchema }, async (request) =>
    (await scheduler.actingFor(request).call<Deployment>('GET', `/deployments/${request.params.id}`)).body,
  );

  server.get(
    '/journal',
    { schema: journalSchema },
    async (request) => (await scheduler.actingFor(request).call<JournalEntry[]>('GET', `/journal${query(request.query)}`)).body,
  );

  server.post(
    '/services/:name/rollback',
    { schema: { ...rollbackSchema, params: NameParams }, config: { access: 'deploy', service: { param: 'name' } } },
    async (request) => (await scheduler.actingFor(request).call<DeployReply>('POST', `/services/${request.params.name}/rollback`, request.body)).body,
  );

  server.get(
    '/services/:name/units/:unit/logs',
    {
      schema: {
        description: "A unit's container output as text, from the agent of its machine; `follow` streams.",
        params: LogParams,
        querystring: Type.Object({
          tail: Type.Integer({ minimum: 0, maximum: 100_000, default: 100 }),
          follow: Type.Boolean({ default: false }),
        }),
        response: { 200: Type.Unsafe<Readable>({ type: 'string' }), ...errorResponses },
      },
    },
    async (request, reply) => {
      const { name, unit } = request.params;
      const found = (await listClusterUnits(store)).find((u) => u.service === name && u.unit === unit);
      if (!found) throw notFound(`service ${name} has no unit ${unit}`);
      const machine = await readRecord<Machine>(store, machineKey(found.machine));
      if (!machine) throw unavailable(`machine ${found.machine} of ${unit} is not registered (its agent is down)`);
      const url = `http://${machine.record.address}/units/${unit}/logs${query(request.query)}`;
      let response;
      try {
        const authorization = request.headers.authorization;
        response = await undiciRequest(url, { headersTimeout: 10_000, bodyTimeout: 0, headers: authorization === undefined ? {} : { authorization } });
      } catch (error) {
        throw unavailable(`agent of machine ${found.machine} at ${machine.record.address} is not answering: ${(error as Error).message}`);
      }
      if (response.statusCode !== 200) {
        const body = (await response.body.json().catch(() => ({}))) as { message?: string };
        throw new HttpError(response.statusCode >= 500 ? 502 : response.statusCode, body.message ?? `agent answered ${response.statusCode}`);
      }
      reply.raw.once('close', () => response.body.destroy());
      return reply.type('text/plain; charset=utf-8').send(response.body);
    },
  );
}
