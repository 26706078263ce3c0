import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import { PrefixCache } from '../../src/store/prefix-cache.js';
import type { WatchEvent } from '../../src/store/store.js';

// One watched copy per store and prefix in a process: roles run together (`platform up`) share it,
// and it lasts as long as its last user.

const dir = mkdtempSync(join(tmpdir(), 'prefix-cache-'));
const store = await EmbeddedStore.open(dir);
t.teardown(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Counts the watches the store opens, and how many are still open. */
const watches = { opened: 0, open: 0 };
const watchPrefix = store.watchPrefix.bind(store);
store.watchPrefix = async (prefix, onEvent) => {
  const watch = await watchPrefix(prefix, onEvent);
  watches.opened += 1;
  watches.open += 1;
  return {
    close: async () => {
      watches.open -= 1;
      await watch.close();
    },
  };
};

t.test('users of one prefix share one watch, which ends with the last of them', async (t) => {
  const before = { ...watches };
  const first = await PrefixCache.start(store, '/shared/a/');
  const second = await PrefixCache.start(store, '/shared/a/');
  const other = await PrefixCache.start(store, '/shared/b/');
  t.equal(watches.opened - before.opened, 2, 'one watch per prefix');

  const heardByFirst: WatchEvent[] = [];
  first.onChange((event) => heardByFirst.push(event));
  await second.caughtUp(await store.put('/shared/a/x', '1'));
  t.equal(first.get('/shared/a/x')?.value, '1', 'both users see the write');
  t.equal(heardByFirst.length, 1);

  await first.close();
  await second.caughtUp(await store.put('/shared/a/x', '2'));
  t.equal(second.get('/shared/a/x')?.value, '2', 'the other user still gets changes');
  t.equal(heardByFirst.length, 1, "a closed user's listeners hear nothing more");
  t.equal(watches.open - before.open, 2, 'the watch stays while a user remains');

  await second.close();
  await first.close();
  t.equal(watches.open - before.open, 1, 'the last user closing ends the watch (closing twice counts once)');
  await other.close();

  const again = await PrefixCache.start(store, '/shared/a/');
  t.equal(watches.opened - before.opened, 3, 'a new user after that starts a new watch');
  t.equal(again.get('/shared/a/x')?.value, '2', 'listed afresh');
  await again.close();
});
