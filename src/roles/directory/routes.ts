import { randomUUID } from 'node:crypto';
import { Type } from '@sinclair/typebox';
import type { RoleServer } from '../../http/server.js';
import { conflict, notFound, badRequest } from '../../http/errors.js';
import type { Store } from '../../store/store.js';
import { cachedDeclaration, createService, deleteService, updateService } from '../../store/records/services.js';
import { decodeCached, type PrefixCache } from '../../store/prefix-cache.js';
import { ErrorReply, NameParams, errorResponses, writeRefusals } from '../../schemas/common.js';
import {
  CreatedReply,
  DirectoryServiceCreate,
  Service,
  ServiceConfig,
  ServiceConfigPatch,
  ServiceListQuery,
  ServicePatch,
  defaultConfig,
} from '../../schemas/service.js';
import { sameRepository } from '../../image-reference.js';
import { applyConfigPatch, assertConsistent } from './config-patch.js';
import { reservedNames } from './reserved-names.js';
import { assertRecordSize } from './record-size.js';
import { cachedConfigFor, cachedWithConfigFor } from '../../auth/env-redaction.js';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { WriteLimits } from '../../auth/write-budget.js';
import type { Quota } from '../../schemas/quota.js';
import { assertWithinQuotas } from './quota-check.js';

// The service directory owns service declarations and their next config.

export function newService(body: DirectoryServiceCreate, now = new Date().toISOString()): Service {
  const defaults = defaultConfig();
  return {
    name: body.name,
    uuid: randomUUID(),
    description: body.description ?? '',
    containerImage: body.containerImage,
    autoDeploy: body.autoDeploy ?? 'always',
    conflictsWith: body.conflictsWith ?? '',
    loadBalanced: body.loadBalanced ?? true,
    publicFacing: body.publicFacing ?? false,
    config: {
      numInstances: body.numInstances ?? defaults.numInstances,
      ports: body.ports ?? defaults.ports,
      env: body.env ?? defaults.env,
      ...unitShape(body),
    },
    createdAt: now,
    updatedAt: now,
  };
}

/** The optional fields of the create body that go to the config as given. */
const unitShape = (body: DirectoryServiceCreate): Partial<ServiceConfig> => ({
  ...(body.resources ? { resources: body.resources } : {}),
  ...(body.placement ? { placement: body.placement } : {}),
  ...(body.volumes ? { volumes: body.volumes } : {}),
  ...(body.volumeMove ? { volumeMove: body.volumeMove } : {}),
});

/** A record over its size limit, a token over its write budget, the store over its space limit. */
const refusedWrites = { 413: ErrorReply, ...writeRefusals } as const;

/**
 * Reads come from a watched in-memory copy of the declarations (PrefixCache); every write waits
 * until that copy has seen it, so a client reads its own writes.
 */
/** What the services may reserve: the quotas (a watched copy of quotaPrefix) and the memory a unit gets when it declares none. */
export interface ReservationPolicy {
  quotas: PrefixCache;
  defaultUnitMemoryMB: number | undefined;
}

/** The config with the default memory limit for units that declare none (--default-unit-memory). */
const withDefaultMemory = (service: Service, memoryMB: number | undefined): Service =>
  memoryMB === undefined || service.config.resources?.memoryMB !== undefined
    ? service
    : { ...service, config: { ...service.config, resources: { ...service.config.resources, memoryMB } } };

/**
 * One route's 200 reply of a record the watched cache holds (or of its cached redacted view), as
 * the route's serializer writes it, made once per version of the record and sent as that text:
 * the record does not change while its version lasts (decodeCached parses it once per version),
 * so serializing it on every read, and measuring and copying the text the serializer pieces
 * together, was work done again for nothing (issue 29). The same bytes and Content-Type as the
 * serialized object. Per route: another route's schema writes the same object differently.
 * Sent from a synchronous handler (which must then return nothing): an async one costs every read
 * a promise and a microtask, and a read of the cache waits for nothing. What it throws (404) is
 * answered as an async handler's rejection is.
 */
function serializedOnce(): (reply: FastifyReply, view: object) => void {
  const texts = new WeakMap<object, string>();
  return (reply, view) => {
    let text = texts.get(view);
    if (text === undefined) texts.set(view, (text = reply.serialize(view) as string));
    void reply.type(JSON_TYPE).send(text);
  };
}

/** Fastify's Content-Type of a serialized reply. */
const JSON_TYPE = 'application/json; charset=utf-8';

export function directoryRoutes(server: RoleServer, store: Store, services: PrefixCache, limits: WriteLimits, policy: ReservationPolicy): void {
  const cached = (name: string): Service | undefined => {
    const entry = cachedDeclaration(services, name);
    return entry ? decodeCached<Service>(entry) : undefined;
  };
  const find = (name: string): Service => {
    const service = cached(name);
    if (!service) throw notFound(`service ${name} is not declared`);
    return service;
  };
  /**
   * The record as it would be stored, with the default memory, within the quotas, the size limit
   * and the caller's budget (charged once, not again on a retried swap).
   */
  const admitted = (request: FastifyRequest) => {
    let charged = false;
    return (asked: Service): Service => {
      const service = withDefaultMemory(asked, policy.defaultUnitMemoryMB);
      const declared = services.values().map((entry) => decodeCached<Service>(entry));
      assertWithinQuotas(policy.quotas.values().map((entry) => decodeCached<Quota>(entry)), declared, service);
      const bytes = assertRecordSize(service);
      if (!charged) limits.budget.charge(request, bytes);
      charged = true;
      return service;
    };
  };
  const update = async (request: FastifyRequest, name: string, change: (service: Service) => Service): Promise<Service> => {
    await limits.space.assertRoom();
    const admit = admitted(request);
    const updated = await updateService(store, name, (service) => admit({ ...change(service), updatedAt: new Date().toISOString() }));
    if (!updated) throw notFound(`service ${name} is not declared`);
    await services.caughtUp(updated.revision);
    return updated.record;
  };

  server.post(
    '/services',
    {
      schema: {
        description: 'Declare a service.',
        body: DirectoryServiceCreate,
        response: { 201: CreatedReply, ...errorResponses, ...refusedWrites },
      },
    },
    async (request, reply) => {
      if (reservedNames.has(request.body.name)) {
        throw badRequest(`name ${request.body.name} is reserved for a platform component`);
      }
      const asked = newService(request.body);
      assertConsistent(asked.config);
      await limits.space.assertRoom();
      const service = admitted(request)(asked);
      // Create-if-absent in one store transaction: of two concurrent creates, exactly one wins.
      const revision = await createService(store, service);
      if (revision === 0) throw conflict(`service ${service.name} already exists`);
      await services.caughtUp(revision);
      return reply.status(201).send({ meta: { statusCode: 201, ok: true, uuid: service.uuid, name: service.name } });
    },
  );

  server.get(
    '/services',
    {
      schema: {
        description: 'Every declared service, by name; `containerImage` keeps those of that repository.',
        querystring: ServiceListQuery,
        response: { 200: Type.Array(Service), ...errorResponses },
      },
    },
    async (request) => {
      const all = services.values().map((entry) => decodeCached<Service>(entry));
      const image = request.query.containerImage;
      const listed = image ? all.filter((service) => sameRepository(service.containerImage, image)) : all;
      return listed.map((service) => cachedWithConfigFor(request, service.name, service));
    },
  );

  const serviceText = serializedOnce();
  server.get(
    '/services/:name',
    { schema: { params: NameParams, response: { 200: Service, ...errorResponses } } },
    (request, reply) => {
      serviceText(reply, cachedWithConfigFor(request, request.params.name, find(request.params.name)));
    },
  );

  server.patch(
    '/services/:name',
    {
      schema: {
        description: 'JSON merge patch of the declaration (the config has its own route).',
        params: NameParams,
        body: ServicePatch,
        response: { 200: Service, ...errorResponses, ...refusedWrites },
      },
    },
    async (request) => update(request, request.params.name, (service) => ({ ...service, ...request.body })),
  );

  server.delete(
    '/services/:name',
    { schema: { params: NameParams, response: { 204: Type.Null(), 404: ErrorReply, 503: ErrorReply } } },
    async (request, reply) => {
      const revision = await deleteService(store, request.params.name);
      if (revision === 0) throw notFound(`service ${request.params.name} is not declared`);
      await services.caughtUp(revision);
      return reply.status(204).send(null);
    },
  );

  const configText = serializedOnce();
  server.get(
    '/services/:name/config',
    { schema: { description: 'The next config.', params: NameParams, response: { 200: ServiceConfig, ...errorResponses } } },
    (request, reply) => {
      configText(reply, cachedConfigFor(request, request.params.name, find(request.params.name).config));
    },
  );

  server.patch(
    '/services/:name/config',
    {
      schema: {
        description: 'JSON merge patch of the next config: keys set, null removes an env var or resets a field.',
        params: NameParams,
        body: ServiceConfigPatch,
        response: { 200: ServiceConfig, ...errorResponses, ...refusedWrites },
      },
      config: { access: 'deploy', service: { param: 'name' } },
    },
    async (request) =>
      (await update(request, request.params.name, (service) => ({ ...service, config: applyConfigPatch(service.config, request.body) }))).config,
  );
}
