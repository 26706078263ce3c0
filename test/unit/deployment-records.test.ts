import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import type { Store } from '../../src/store/store.js';
import { deploymentKey } from '../../src/store/keys.js';
import { getDeployment, recordOutcome, recordPhase, recordProgress, startDeployment } from '../../src/roles/scheduler/deployment-records.js';
import type { Release, UnitProgress } from '../../src/schemas/release.js';

// A rollout updates its deployment record at every change of its units, while Docker starts them
// on the same cores: each update is one compare-and-swap on the version this process wrote last,
// and a record someone else wrote since is read afresh, so no change is lost.

const dir = mkdtempSync(join(tmpdir(), 'deployment-records-'));
const embedded = await EmbeddedStore.open(dir);
t.teardown(async () => {
  await embedded.close();
  rmSync(dir, { recursive: true, force: true });
});

/** The embedded store, counting the reads made through it. */
const reads = { count: 0 };
const store: Store = new Proxy(embedded, {
  get(target, property, receiver) {
    const value = Reflect.get(target, property, receiver);
    if (typeof value !== 'function') return value;
    return (...args: unknown[]) => {
      if (property === 'get' || property === 'list') reads.count += 1;
      return (value as (...a: unknown[]) => unknown).apply(target, args);
    };
  },
});

const release = (service: string): Release =>
  ({ service, version: 1, image: 'registry.test/web@sha256:' + 'a'.repeat(64), config: { numInstances: 1 } }) as unknown as Release;

const progress = (sub: UnitProgress['sub']): UnitProgress[] => [{ unit: 'web-1.service', machine: 'm1', active: 'activating', sub }];

t.test('updates of a deployment this process wrote read nothing', async (t) => {
  const deployment = await startDeployment(store, release('quiet'), 'manual');
  reads.count = 0;
  await recordPhase(store, deployment, 'pulling');
  await recordPhase(store, deployment, 'rolling');
  await recordProgress(store, deployment, progress('start-pre'));
  await recordOutcome(store, deployment, 'succeeded', 'all units running');
  t.equal(reads.count, 0, 'four updates, no read');
  const stored = await getDeployment(store, deployment.id);
  t.match(stored, { state: 'succeeded', units: progress('start-pre') });
});

t.test('a record written by someone else since is read afresh and keeps their change', async (t) => {
  const deployment = await startDeployment(store, release('shared'), 'manual');
  await recordPhase(store, deployment, 'rolling');
  const theirs = { ...(await getDeployment(store, deployment.id))!, reason: 'written elsewhere' };
  await embedded.put(deploymentKey(deployment.id), JSON.stringify(theirs));
  reads.count = 0;
  await recordProgress(store, deployment, progress('running'));
  t.equal(reads.count, 1, 'the failed compare costs one read');
  t.match(await getDeployment(store, deployment.id), { state: 'rolling', reason: 'written elsewhere', units: progress('running') });
});

t.test('a record deleted meanwhile is not written again', async (t) => {
  const deployment = await startDeployment(store, release('gone'), 'manual');
  await embedded.delete(deploymentKey(deployment.id));
  await recordPhase(store, deployment, 'rolling');
  t.equal(await getDeployment(store, deployment.id), undefined);
});
