import t from 'tap';
import { EtcdStore } from '../../src/store/etcd-store.js';
import { tokenKey, webhookDeliveryPrefix } from '../../src/store/keys.js';
import { StoreUnavailableError } from '../../src/store/store.js';
import { BOOTSTRAP_TOKEN_NAME, bootstrapToken, hashSecret } from '../../src/auth/tokens.js';
import { DeliveryLog } from '../../src/roles/scheduler/webhooks/deliveries.js';
import { startEtcd } from '../harness/etcd.js';
import { interceptWritesTo, loseAnswersOfWritesTo } from '../harness/lost-answers.js';

// Create-if-absent writes on a real etcd whose answer is lost after they committed (issue 30
// item 3: seen on systemd machines as DEADLINE_EXCEEDED). A retry of such a write finds the key
// and reads "taken"; a writer that can recognize its own write reads the key instead of failing.

const etcd = await startEtcd();
const etcdStore = new EtcdStore([etcd.url]);
t.teardown(async () => {
  await etcdStore.close();
  await etcd.stop();
});

t.test('a bootstrap whose write committed but whose answer was lost returns its token', async (t) => {
  const key = tokenKey(BOOTSTRAP_TOKEN_NAME);
  const lossy = loseAnswersOfWritesTo(etcdStore, key);
  const issued = await bootstrapToken(lossy.store);
  t.equal(lossy.lost, 1, 'the write committed and its answer was lost');
  t.ok(issued, 'the token is returned: no other bootstrap can ever return one');
  const stored = await etcdStore.get(key);
  t.equal(JSON.parse(stored?.value ?? '{}').hash, hashSecret(issued?.secret ?? ''), 'its secret is the one stored');
  t.equal(issued?.revision, stored?.modRevision);
  t.equal(await bootstrapToken(etcdStore), undefined, 'bootstrap is closed after it');
});

t.test('a bootstrap refused because another won stays an error when its answer is lost', async (t) => {
  await etcdStore.deletePrefix('/platform/');
  const refusing = interceptWritesTo(etcdStore, tokenKey(BOOTSTRAP_TOKEN_NAME), async (result) => {
    // Another bootstrap wins between this one's refused write and its answer.
    if (result.succeeded) throw new Error('the test expected this write to be refused');
    throw new StoreUnavailableError(etcdStore.description, new Error('4 DEADLINE_EXCEEDED'));
  });
  const winner = await bootstrapToken(etcdStore);
  t.ok(winner);
  await t.rejects(bootstrapToken(refusing), StoreUnavailableError, 'an unknown outcome that was not ours stays an error');
});

t.test('a webhook delivery whose claim committed but whose answer was lost is claimed, and its repeat is a repeat', async (t) => {
  const lossy = loseAnswersOfWritesTo(etcdStore, webhookDeliveryPrefix);
  const event = 'sha256:lost-answer-event';
  t.equal(await new DeliveryLog(lossy.store).claim('registry', event), true, 'claimed: the push is handled now (a redelivery would be taken for a repeat)');
  t.equal(lossy.lost, 1, 'the claim committed and its answer was lost');
  t.equal(await new DeliveryLog(etcdStore).claim('registry', event), false, 'a redelivery is a repeat');
});

t.test('a webhook delivery claimed by another scheduler stays a repeat when the answer of a refused claim is lost', async (t) => {
  const event = 'sha256:claimed-elsewhere';
  t.equal(await new DeliveryLog(etcdStore).claim('registry', event), true);
  const refusing = interceptWritesTo(etcdStore, webhookDeliveryPrefix, async () => {
    throw new StoreUnavailableError(etcdStore.description, new Error('4 DEADLINE_EXCEEDED'));
  });
  await t.rejects(new DeliveryLog(refusing).claim('registry', event), StoreUnavailableError, 'not taken for its own');
});
