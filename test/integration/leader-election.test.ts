import t, { type Test } from 'tap';
import { pino } from 'pino';
import type { FastifyBaseLogger } from 'fastify';
import { EtcdStore } from '../../src/store/etcd-store.js';
import { FencedStore } from '../../src/store/fenced-store.js';
import { schedulerLeaderKey } from '../../src/store/keys.js';
import type { Store } from '../../src/store/store.js';
import { setTimeout as sleep } from 'node:timers/promises';
import { Leadership } from '../../src/roles/scheduler/leadership.js';
import { startEtcd } from '../harness/etcd.js';
import { interceptWritesTo, loseAnswersOfWritesTo } from '../harness/lost-answers.js';
import { waitFor } from '../harness/wait.js';

// The scheduler's election on a real etcd, where a write's answer can be lost after the write
// committed (issue 30 item 3: seen on systemd machines, where no scheduler ever led after it).

const log = pino({ level: 'silent' }) as unknown as FastifyBaseLogger;
const etcd = await startEtcd();
const etcdStore = new EtcdStore([etcd.url]);
t.teardown(async () => {
  await etcdStore.close();
  await etcd.stop();
});

interface Candidate {
  leadership: Leadership;
  elections: number;
}

function candidate(t: Test, store: Store, id: string): Candidate {
  const counts: Candidate = { leadership: undefined as unknown as Leadership, elections: 0 };
  counts.leadership = new Leadership(store, {
    id,
    address: `127.0.0.1:${9002}`,
    announce: false,
    ttlSeconds: 5,
    log,
    events: { elected: () => (counts.elections += 1), deposed: () => undefined },
  });
  t.teardown(() => counts.leadership.close());
  return counts;
}

t.beforeEach(async () => {
  await etcdStore.delete(schedulerLeaderKey);
});

t.test('a campaign whose write committed but whose answer was lost leads, fenced by the key it wrote', async (t) => {
  const lossy = loseAnswersOfWritesTo(etcdStore, schedulerLeaderKey);
  const scheduler = candidate(t, lossy.store, 'scheduler-a');
  await scheduler.leadership.start();
  await waitFor(() => scheduler.leadership.isLeader(), 5000, { what: 'the scheduler to lead after its lost answer' });
  t.equal(lossy.lost, 1, 'the first election write committed and its answer was lost');
  t.equal(scheduler.elections, 1, 'elected once');
  const key = await etcdStore.get(schedulerLeaderKey);
  t.equal(JSON.parse(key?.value ?? '{}').id, 'scheduler-a', 'the key that was written is the one it leads by');
  t.same(scheduler.leadership.fence(), [{ key: schedulerLeaderKey, target: 'createRevision', equals: key?.createRevision }], 'its fence is the create revision of that key');
  const fenced = new FencedStore(etcdStore, () => scheduler.leadership.fence());
  t.ok(await fenced.put('/platform/test/fenced', 'written'), 'a fenced write passes');
});

t.test('a scheduler does not take a key another scheduler holds, and leads once that one closes', async (t) => {
  const first = candidate(t, etcdStore, 'scheduler-a');
  await first.leadership.start();
  t.ok(first.leadership.isLeader(), 'the first scheduler leads');
  const second = candidate(t, etcdStore, 'scheduler-b');
  await second.leadership.start();
  t.notOk(second.leadership.isLeader(), 'the second one, whose campaign has ended, does not');
  await first.leadership.close();
  await waitFor(() => second.leadership.isLeader(), 5000, { what: 'the second scheduler to lead' });
  t.equal(JSON.parse((await etcdStore.get(schedulerLeaderKey))?.value ?? '{}').id, 'scheduler-b');
});

t.test('a leader key that goes away while a campaign reads it brings one more campaign', async (t) => {
  const holder = await etcdStore.grantLease(5);
  await etcdStore.put(schedulerLeaderKey, JSON.stringify({ id: 'scheduler-gone' }), { lease: holder.id });
  let gone = 0;
  const watch = await etcdStore.watchPrefix(schedulerLeaderKey, (event) => event.type === 'delete' && (gone += 1));
  t.teardown(() => watch.close());
  // The holder goes away after this campaign's write was refused and before its answer arrives:
  // the deletion is seen while the campaign still runs.
  let refused = 0;
  const store = interceptWritesTo(etcdStore, schedulerLeaderKey, async (result) => {
    if (result.succeeded || refused++ > 0) return result;
    await holder.revoke();
    await waitFor(() => gone > 0, 5000, { what: 'the deletion of the leader key' });
    await sleep(200);
    return result;
  });
  const scheduler = candidate(t, store, 'scheduler-b');
  await scheduler.leadership.start();
  t.equal(refused, 1, 'its first write was refused: the key was held');
  await waitFor(() => scheduler.leadership.isLeader(), 5000, { what: 'the scheduler to lead after the key went away mid-campaign' });
  t.equal(scheduler.elections, 1);
});
