import t from 'tap';
import { pino } from 'pino';
import type { FastifyBaseLogger } from 'fastify';
import { startEtcd } from '../harness/etcd.js';
import { freePort } from '../harness/free-port.js';
import { http, serveRole } from '../harness/platform.js';
import { waitFor } from '../harness/wait.js';
import { EtcdStore } from '../../src/store/etcd-store.js';
import { deploymentKey, deploymentPrefix, journalPrefix, releaseKey, releasePrefix, serviceKey } from '../../src/store/keys.js';
import { appendJournal } from '../../src/store/records/journal.js';
import { Housekeeping } from '../../src/roles/scheduler/housekeeping/housekeeping.js';
import { defaultRetention } from '../../src/config.js';
import type { Store } from '../../src/store/store.js';
import { schemaAdvance, UNVERSIONED_SCHEMA } from '../../src/store/store-schema.js';
import { STORE_SCHEMA_VERSION } from '../../src/store/schema-version.js';
import type { Deployment, Release } from '../../src/schemas/release.js';
import type { Service } from '../../src/schemas/service.js';

// History retention on a real etcd: a scheduler started with small limits deletes the deployment
// records and journal entries beyond them when it takes the lead, and keeps the ones that matter.

const etcd = await startEtcd();
const store = new EtcdStore([etcd.url]);
t.teardown(async () => {
  await store.close();
  await etcd.stop();
});

/** Ids in the scheduler's time-ordered form, 1 s apart, so that key order is the order they are seeded in. */
let seconds = 0;
const seededId = (): string => `${(Date.UTC(2026, 0, 1) + 1000 * ++seconds).toString(36).padStart(9, '0')}-seed`;

const seeded = async (service: string, state: Deployment['state'], release: number): Promise<Deployment> => {
  const now = new Date().toISOString();
  const deployment: Deployment = { id: seededId(), service, release, image: `127.0.0.1:5000/${service}@sha256:${String(release).padStart(64, '0')}`, state, trigger: 'manual', units: [], createdAt: now, updatedAt: now, finishedAt: now };
  await store.put(deploymentKey(deployment.id), JSON.stringify(deployment));
  return deployment;
};

t.test('the leader deletes history beyond --keep-deployments and --keep-journal', async (t) => {
  const good = await seeded('web', 'succeeded', 1);
  const failed: Deployment[] = [];
  for (let release = 2; release <= 6; release++) failed.push(await seeded('web', 'failed', release));
  const other = await seeded('api', 'succeeded', 1);
  for (let i = 0; i < 30; i++) await appendJournal(store, { service: 'web', kind: 'test.entry', message: `entry ${i}` });
  const journalBefore = (await store.list(journalPrefix)).map((kv) => kv.key);
  // Seeded in today's layout: the leader has no schema to migrate, whose journal entry would be the newest.
  const { compare, write } = schemaAdvance({ version: UNVERSIONED_SCHEMA, modRevision: 0 }, STORE_SCHEMA_VERSION, 'retention.test', new Date());
  await store.txn([compare], [write]);

  const scheduler = await serveRole('scheduler', await freePort(), ['--etcd', etcd.url, '--announce-ttl', '3', '--keep-deployments', '2', '--keep-journal', '10']);
  t.teardown(() => scheduler.stop());

  const journal = await waitFor(async () => {
    const keys = (await store.list(journalPrefix)).map((kv) => kv.key);
    return keys.length === 10 ? keys : undefined;
  }, 20_000, { what: 'the journal pruned to 10 entries' });
  t.same(journal, journalBefore.slice(-10), 'the newest 10 journal entries are kept');

  const ids = (await store.list(deploymentPrefix)).map((kv) => JSON.parse(kv.value) as Deployment).map((d) => d.id).sort();
  t.same(ids, [good.id, failed[3]!.id, failed[4]!.id, other.id].sort(), "web keeps its last success and its 2 newest failures; api's only deployment stays");
  const listed = await http('GET', `${scheduler.url}/deployments?service=web`);
  t.same(listed.body.map((d: Deployment) => d.release), [6, 5, 1], 'GET /deployments lists what is left, newest first');
});

t.test('limits are validated', async (t) => {
  const port = await freePort();
  await t.rejects(serveRole('scheduler', port, ['--etcd', etcd.url, '--keep-deployments', '0']), /--keep-deployments must be an integer from 1/);
});

t.test("a service declared again while a pass runs still loses its predecessor's releases", async (t) => {
  // The pass lists the store, finds the name undeclared, and deletes its releases only while it is
  // still undeclared. Here the successor's declaration lands between the list and that delete, the
  // window in which CI once saw the old releases stay until the next minute's pass.
  const name = 'redeclared';
  const release = (version: number): Release => ({ service: name, version, image: `127.0.0.1:5000/old@sha256:${String(version).padStart(64, '0')}`, digest: `sha256:${String(version).padStart(64, '0')}`, config: { numInstances: 1, ports: [], env: {} }, pushedAt: 0, serviceUuid: 'a2b5c6d8-0000-4000-8000-000000000001', deployment: `d${version}`, createdAt: new Date().toISOString() });
  for (const version of [1, 2]) await store.put(releaseKey(name, version), JSON.stringify(release(version)));
  const now = new Date().toISOString();
  const successor: Service = { name, uuid: 'a2b5c6d8-0000-4000-8000-000000000002', description: 'successor', containerImage: '127.0.0.1:5000/new', autoDeploy: 'never', conflictsWith: '', loadBalanced: false, publicFacing: false, config: { numInstances: 1, ports: [], env: {} }, createdAt: now, updatedAt: now };
  let declaredBeforeTxn = false;
  const interleaved = new Proxy(store, {
    get(target, property, receiver) {
      if (property !== 'txn') return Reflect.get(target, property, receiver) as unknown;
      return async (...args: Parameters<Store['txn']>) => {
        if (!declaredBeforeTxn) {
          declaredBeforeTxn = true;
          await target.put(serviceKey(name), JSON.stringify(successor));
        }
        return target.txn(...args);
      };
    },
  });
  await new Housekeeping(interleaved, defaultRetention, pino({ level: 'silent' }) as unknown as FastifyBaseLogger).pruneHistory();
  t.ok(declaredBeforeTxn, 'the successor was declared between the list and the delete');
  t.equal((await store.list(releasePrefix(name))).length, 0, "the predecessor's releases are gone in the same pass");
  t.ok(await store.get(serviceKey(name)), 'the successor stays declared');
  await store.delete(serviceKey(name));
});
