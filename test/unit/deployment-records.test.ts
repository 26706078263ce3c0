import t from 'tap';
import { observedStore } from '../harness/observed-store.js';
import { temporaryStore } from '../harness/temporary-store.js';
import type { Store } from '../../src/store/store.js';
import { deploymentKey } from '../../src/store/keys.js';
import { getDeployment, recordOutcome, recordPhase, recordProgress, rolloutRecorder, startDeployment } from '../../src/store/records/deployments.js';
import type { Release, UnitProgress } from '../../src/schemas/release.js';

// A rollout updates its deployment record at every change of its units, while Docker starts them
// on the same cores: each update is one compare-and-swap on the version this process wrote last,
// and a record someone else wrote since is read afresh, so no change is lost.

const embedded = await temporaryStore(t, 'deployment-records');

/** The embedded store, counting the reads made through it. */
const reads = { count: 0 };
const store = observedStore(embedded, (method) => {
  if (method === 'get' || method === 'list') reads.count += 1;
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

/** The embedded store, counting the deployment record's writes made through it. */
const countingWrites = (): { store: Store; writes: string[] } => {
  const writes: string[] = [];
  const counted = observedStore(embedded, (method, args) => {
    if (method !== 'txn') return;
    const put = (args[1] as { op: string; key: string; value?: string }[]).find((operation) => operation.op === 'put' && operation.key.includes('/deployments/'));
    if (put?.value) writes.push((JSON.parse(put.value) as { units: UnitProgress[] }).units.map((unit) => unit.sub).join(',') || 'no units');
  });
  return { store: counted, writes };
};

t.test("a rollout's progress is written at once, then at most once an interval, the newest only", async (t) => {
  const deployment = await startDeployment(store, release('thinned'), 'manual');
  const { store: counted, writes } = countingWrites();
  const recorder = rolloutRecorder(counted, deployment, Promise.resolve(), 200);
  recorder.progress(progress('start-pre'));
  for (const sub of ['dead', 'auto-restart', 'exited'] as const) recorder.progress(progress(sub));
  await new Promise((resolve) => setTimeout(resolve, 50));
  t.same(writes, ['start-pre'], 'the first change at once; the next three wait for the interval');
  await new Promise((resolve) => setTimeout(resolve, 250));
  t.same(writes, ['start-pre', 'exited'], 'after the interval, only the newest of the three');
  recorder.progress(progress('running'));
  await recorder.flush();
  t.same(writes, ['start-pre', 'exited', 'running'], 'flush writes what the interval held back');
  t.match(await getDeployment(store, deployment.id), { units: progress('running') });
  await recorder.flush();
  t.equal(writes.length, 3, 'nothing left to write');
});

t.test('progress right after a phase waits out the interval: the phase rewrote the record a moment ago', async (t) => {
  const deployment = await startDeployment(store, release('phased'), 'manual');
  const { store: counted, writes } = countingWrites();
  const recorder = rolloutRecorder(counted, deployment, Promise.resolve(), 200);
  await recorder.phase('rolling');
  recorder.progress(progress('start-pre'));
  await new Promise((resolve) => setTimeout(resolve, 50));
  t.same(writes, ['no units'], 'the phase alone (a 10-unit deploy wrote the placed units a millisecond after it)');
  await new Promise((resolve) => setTimeout(resolve, 250));
  t.same(writes, ['no units', 'start-pre'], 'the progress once the interval is over');
  await recorder.flush();
  t.match(await getDeployment(store, deployment.id), { state: 'rolling', units: progress('start-pre') });
});

t.test('a phase is written after the progress before it, and a failed write fails the rollout', async (t) => {
  const deployment = await startDeployment(store, release('ordered'), 'manual');
  const { store: counted, writes } = countingWrites();
  let allow!: () => void;
  const earlier = new Promise<void>((resolve) => (allow = resolve));
  const recorder = rolloutRecorder(counted, deployment, earlier, 200);
  recorder.progress(progress('dead'));
  const rolling = recorder.phase('rolling');
  await new Promise((resolve) => setTimeout(resolve, 20));
  t.same(writes, [], 'nothing is written before the earlier phase');
  allow();
  await rolling;
  t.same(writes, ['dead', 'dead'], 'the progress, then the phase');
  t.match(await getDeployment(store, deployment.id), { state: 'rolling', units: progress('dead') });

  const failing = rolloutRecorder(counted, deployment, Promise.reject(new Error('store unavailable')), 200);
  await t.rejects(failing.phase('rolling'), /store unavailable/);
  t.throws(() => failing.progress(progress('running')), /store unavailable/, 'the next progress throws the failure');
  await t.rejects(failing.flush(), /store unavailable/);
});
