import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EtcdStore } from '../../src/store/etcd-store.js';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import { PrefixCache } from '../../src/store/prefix-cache.js';
import { StoreUnavailableError, type Store } from '../../src/store/store.js';
import { startEtcd } from '../harness/etcd.js';
import { waitFor } from '../harness/wait.js';

// The watched read cache against both real stores.

const etcd = await startEtcd();
const stores: [string, Store][] = [
  ['etcd', new EtcdStore([etcd.url])],
  ['embedded', await EmbeddedStore.open(mkdtempSync(join(tmpdir(), 'cache-')))],
];
t.teardown(async () => {
  for (const [, store] of stores) await store.close();
  await etcd.stop();
});

for (const [name, store] of stores) {
  t.test(`${name}: the cache holds what was there before it started and follows later writes`, async (t) => {
    await store.put('/c/a', '1');
    await store.put('/c/b', '2');
    await store.put('/other', 'x');
    const cache = await PrefixCache.start(store, '/c/');
    t.teardown(() => cache.close());
    t.same(cache.values().map((v) => [v.key, v.value]), [['/c/a', '1'], ['/c/b', '2']]);
    const revision = await store.put('/c/c', '3');
    await cache.caughtUp(revision);
    t.equal(cache.get('/c/c')?.value, '3', 'a write is visible once caughtUp resolves');
    const deleted = await store.txn([], [{ op: 'delete', key: '/c/a' }]);
    await cache.caughtUp(deleted.revision);
    t.equal(cache.get('/c/a'), undefined);
    await t.rejects(cache.caughtUp(deleted.revision + 1000, 200), StoreUnavailableError, 'waiting for a revision that never comes times out');
  });

  t.test(`${name}: a listener that stops itself on a change does not keep the next one from hearing it`, async (t) => {
    const cache = await PrefixCache.start(store, '/l/');
    t.teardown(() => cache.close());
    // As two event streams of one session do when it is signed out: each stops its listener as it ends.
    const heard: string[] = [];
    const stopFirst = cache.onChange(() => {
      heard.push('first');
      stopFirst();
    });
    cache.onChange(() => heard.push('second'));
    await cache.caughtUp(await store.put('/l/a', '1'));
    t.same(heard, ['first', 'second']);
    await cache.caughtUp(await store.put('/l/b', '2'));
    t.same(heard, ['first', 'second', 'second'], 'the stopped one hears no more');
  });
}

t.test('etcd: while the store is down, reads fail instead of serving stale data, and recover after', async (t) => {
  const store = stores[0]![1];
  const cache = await PrefixCache.start(store, '/d/');
  t.teardown(() => cache.close());
  await store.put('/d/x', '1');
  await waitFor(() => cache.get('/d/x'), 5000);
  await etcd.stop();
  await waitFor(() => {
    try {
      cache.values();
      return false;
    } catch (error) {
      return error instanceof StoreUnavailableError;
    }
  }, 10_000);
  await etcd.restart();
  // The client's circuit breaker, opened by the outage, lets a call through again only after its
  // half-open delay; a write in that window fails with StoreUnavailableError like any outage.
  await waitFor(() => store.put('/d/y', '2'), 10_000, { what: 'the store accepting writes again' });
  const y = await waitFor(() => {
    try {
      return cache.get('/d/y');
    } catch {
      return undefined;
    }
  }, 20_000);
  t.equal(y.value, '2');
});

t.test('etcd: changes missed during an outage reach the listeners when the cache relists', async (t) => {
  const store = stores[0]![1];
  await store.put('/e/lost', '1');
  const cache = await PrefixCache.start(store, '/e/');
  t.teardown(() => cache.close());
  const seen: string[] = [];
  cache.onChange((event) => seen.push(`${event.type} ${event.key}`));
  await etcd.stop();
  rmSync(etcd.dataDir, { recursive: true, force: true });
  // An outage longer than the cache's 1 s ping, so it notices the store was gone.
  await waitFor(() => {
    try {
      cache.values();
      return false;
    } catch {
      return true;
    }
  }, 10_000, { what: 'the cache noticing the outage' });
  await etcd.restart();
  await waitFor(() => seen.includes('delete /e/lost'), 20_000, { what: 'the deletion reported after the relist' });
  t.ok(seen.includes('delete /e/lost'), 'a key gone while the cache was cut off is reported deleted');
});
