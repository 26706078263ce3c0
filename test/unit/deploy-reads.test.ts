import t from 'tap';
import { observedStore } from '../harness/observed-store.js';
import { temporaryStore } from '../harness/temporary-store.js';
import { createService } from '../../src/store/records/services.js';
import { recordOutcome, recordStop, serviceDeployments, startDeployment, watchDeployments } from '../../src/store/records/deployments.js';
import { acceptDeploy } from '../../src/roles/scheduler/deploys/deploy.js';
import type { RegistryClient } from '../../src/roles/scheduler/deploys/registry-client.js';
import type { Release } from '../../src/schemas/release.js';
import type { Service } from '../../src/schemas/service.js';

// Issue 29: the scheduler's store reads per deploy do not depend on how many other services there
// are. Accepting a deploy listed every deployment record of every service (50 finished ones per
// service are kept by default), so at 200 services a deploy read thousands of records.

const embedded = await temporaryStore(t, 'deploy-reads');

/** The embedded store, counting the keys read through it (a get that found one, each key a listing returned). */
const keysRead = { count: 0 };
const store = observedStore(embedded, (method, _args, result) => {
  if (method === 'get' && result) keysRead.count += 1;
  if (method === 'list') keysRead.count += (result as unknown[]).length;
});

const digest = `sha256:${'b'.repeat(64)}`;
const registry = { resolveDigest: async () => digest } as unknown as RegistryClient;
const declare = async (name: string): Promise<Service> => {
  const now = new Date(Date.now() - 60_000).toISOString();
  const service = {
    name,
    uuid: `uuid-${name}`,
    description: '',
    containerImage: 'registry.test/team/web',
    autoDeploy: 'always',
    conflictsWith: '',
    loadBalanced: false,
    publicFacing: false,
    config: { numInstances: 1, ports: [], env: {} },
    createdAt: now,
    updatedAt: now,
  } as unknown as Service;
  await createService(store, service);
  return service;
};
const release = (service: string, version: number): Release =>
  ({ service, version, image: `registry.test/team/web@${digest}`, config: { numInstances: 1, ports: [], env: {} } }) as unknown as Release;

/** Declares services until there are `count` others, each with three finished deployments. */
let others = 0;
async function growTo(count: number): Promise<void> {
  for (; others < count; others++) {
    const name = `other-${others}`;
    await declare(name);
    for (let version = 1; version <= 3; version++) await recordOutcome(store, await startDeployment(store, release(name, version), 'manual'), 'succeeded', 'ran');
  }
}

t.test("the keys a deploy reads are the same with 50, 100 and 200 other services", async (t) => {
  const deployments = await watchDeployments(store);
  t.teardown(() => deployments.close());
  const readPerDeploy: number[] = [];
  for (const count of [50, 100, 200]) {
    await growTo(count);
    const service = await declare(`web-${count}`);
    keysRead.count = 0;
    const accepted = await acceptDeploy({ store, deployments }, registry, { serviceName: service.name, containerRepository: 'registry.test/team/web:v1', pushedAt: 0, triggeredAt: Date.now(), trigger: 'manual' });
    t.equal(accepted.reply.outcome, 'created', `a deploy beside ${count} other services`);
    readPerDeploy.push(keysRead.count);
  }
  t.same(readPerDeploy, [readPerDeploy[0], readPerDeploy[0], readPerDeploy[0]], `keys read per deploy at 50, 100, 200 other services: ${readPerDeploy.join(', ')}`);
  t.ok(readPerDeploy[0]! <= 2, 'the declaration and the service\'s own releases, nothing of the other services');
});

t.test("a deploy sees the service's newest deployment as soon as it is written: the same image again is unchanged, and after a stop it deploys", async (t) => {
  const deployments = await watchDeployments(store);
  t.teardown(() => deployments.close());
  const service = await declare('again');
  const trigger = { serviceName: service.name, containerRepository: 'registry.test/team/web:v1', pushedAt: 0, triggeredAt: Date.now(), trigger: 'manual' };
  const first = await acceptDeploy({ store, deployments }, registry, trigger);
  t.equal(first.reply.outcome, 'created');
  t.equal((await acceptDeploy({ store, deployments }, registry, trigger)).reply.outcome, 'unchanged', 'the deployment in flight is the target');
  t.equal((await serviceDeployments(store, deployments, service.name))[0]?.id, first.deployment!.id, 'newest first');
  await recordStop(store, deployments, service.name);
  t.equal((await acceptDeploy({ store, deployments }, registry, trigger)).reply.outcome, 'created', 'the stop just recorded is seen: the same image deploys again');
});
