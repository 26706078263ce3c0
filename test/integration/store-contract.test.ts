// One contract, two stores: every behaviour the platform relies on is checked against etcd
// (a real etcd process) and against the embedded store (a real temp directory), with the same
// assertions. Store-specific tests follow: persistence and locking for the embedded store,
// restarts and outages for etcd.

import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Etcd3 } from 'etcd3';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import { EtcdStore } from '../../src/store/etcd-store.js';
import { LeasedKeys } from '../../src/store/leased-keys.js';
import { openStore } from '../../src/store/open-store.js';
import { StoreUnavailableError, type Store, type WatchEvent } from '../../src/store/store.js';
import { startEtcd, type EtcdProcess } from '../harness/etcd.js';
import { waitFor } from '../harness/wait.js';

type Tap = Parameters<Parameters<typeof t.test>[0]>[0];

t.setTimeout(120_000);
// The two stores are independent: run their suites side by side to halve the wall time.
t.jobs = 2;

const tempDirs: string[] = [];
const tempDir = (): string => {
  const dir = mkdtempSync(join(tmpdir(), 'platform-store-'));
  tempDirs.push(dir);
  return dir;
};
t.teardown(() => {
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
});

/** Records watch events; `waitCount` waits (bounded) until at least n arrived. */
function recorder() {
  const events: WatchEvent[] = [];
  return {
    events,
    onEvent: (event: WatchEvent) => void events.push(event),
    waitCount: (n: number, timeoutMs = 5000) => waitFor(() => events.length >= n, timeoutMs, { what: `${n} watch event(s), got ${events.length}` }),
  };
}

const absent = (store: Store, key: string) => async () => (await store.get(key)) === undefined;

/** The contract: run against each implementation, each test in its own key prefix. */
function contract(t: Tap, store: Store): void {
  let counter = 0;
  const space = () => `/contract/${++counter}/`;

  t.test('put then get returns the value with its revisions and version', async (t) => {
    const key = `${space()}a`;
    const first = await store.put(key, 'one');
    t.same(await store.get(key), { key, value: 'one', createRevision: first, modRevision: first, version: 1 });
    const second = await store.put(key, 'two');
    t.ok(second > first, 'each write increments the revision');
    t.same(await store.get(key), { key, value: 'two', createRevision: first, modRevision: second, version: 2 });
    t.equal(await store.get(`${key}-missing`), undefined, 'a missing key is undefined');
  });

  t.test('delete removes a key and reports whether it existed', async (t) => {
    const key = `${space()}a`;
    await store.put(key, 'v');
    t.equal(await store.delete(key), true);
    t.equal(await store.get(key), undefined);
    t.equal(await store.delete(key), false, 'deleting a missing key reports false');
  });

  t.test('list returns the keys under a prefix sorted by key, and none of sibling prefixes', async (t) => {
    const root = space();
    for (const key of ['app/c', 'app/a', 'app/b/x', 'app/b', 'apple/a', 'app', 'ap/z']) await store.put(`${root}${key}`, key);
    const listed = await store.list(`${root}app/`);
    t.same(listed.map((kv) => kv.key), [`${root}app/a`, `${root}app/b`, `${root}app/b/x`, `${root}app/c`]);
    t.same(listed.map((kv) => kv.value), ['app/a', 'app/b', 'app/b/x', 'app/c']);
    t.ok(listed.every((kv) => kv.modRevision > 0 && kv.version === 1), 'listed entries carry their revisions');
    t.same(await store.list(`${root}nothing/`), []);
  });

  t.test('listWithRevision names the revision its list was read at, deletes counted (backups name it)', async (t) => {
    const root = space();
    await store.put(`${root}a`, 'one');
    const last = await store.put(`${root}b`, 'two');
    t.same(await store.listWithRevision(`${root}`), { revision: last, kvs: await store.list(root) });
    const deleted = (await store.txn([], [{ op: 'delete', key: `${root}b` }])).revision;
    const after = await store.listWithRevision(root);
    t.equal(after.revision, deleted, 'a delete moves the revision past every key listed');
    t.same(after.kvs.map((kv) => kv.key), [`${root}a`]);
  });

  t.test("a list larger than gRPC's default 4 MiB message arrives whole", async (t) => {
    const root = space();
    const value = 'x'.repeat(200 * 1024);
    for (let i = 0; i < 30; i++) await store.put(`${root}big/${String(i).padStart(2, '0')}`, value);
    const listed = await store.list(`${root}big/`);
    t.equal(listed.length, 30);
    t.equal(listed.reduce((sum, kv) => sum + kv.value.length, 0), 30 * value.length, '6 MB of values');
    await store.deletePrefix(`${root}big/`);
  });

  t.test('deletePrefix deletes only the keys under the prefix and counts them', async (t) => {
    const root = space();
    for (const key of ['jobs/1', 'jobs/2', 'jobs/2/x', 'jobsx', 'other']) await store.put(`${root}${key}`, 'v');
    t.equal(await store.deletePrefix(`${root}jobs/`), 3);
    t.same((await store.list(root)).map((kv) => kv.key), [`${root}jobsx`, `${root}other`]);
    t.equal(await store.deletePrefix(`${root}jobs/`), 0);
  });

  t.test('create writes only when the key is absent', async (t) => {
    const key = `${space()}leader`;
    t.equal(await store.create(key, 'first'), true);
    t.equal(await store.create(key, 'second'), false);
    t.equal((await store.get(key))?.value, 'first', 'a losing create writes nothing');
    const before = (await store.get(key))!.createRevision;
    await store.delete(key);
    t.equal(await store.create(key, 'third'), true, 'after a delete the key can be created again');
    t.ok((await store.get(key))!.createRevision > before, 'a re-created key has a new createRevision');
  });

  t.test('of concurrent creates of one key exactly one wins', async (t) => {
    const key = `${space()}lock`;
    const contenders = ['a', 'b', 'c', 'd', 'e'];
    const results = await Promise.all(contenders.map((name) => store.create(key, name)));
    t.equal(results.filter(Boolean).length, 1, 'exactly one create returned true');
    t.equal((await store.get(key))?.value, contenders[results.indexOf(true)], 'the stored value is the winner’s');
  });

  t.test('compareAndSwap writes only on the expected modRevision', async (t) => {
    const key = `${space()}config`;
    t.equal(await store.compareAndSwap(key, 'created', 0), true, 'modRevision 0 means absent: swap creates');
    const current = (await store.get(key))!;
    t.equal(await store.compareAndSwap(key, 'v2', current.modRevision), true);
    t.equal(await store.compareAndSwap(key, 'stale', current.modRevision), false, 'a stale modRevision fails');
    const after = (await store.get(key))!;
    t.equal(after.value, 'v2');
    t.equal(after.version, 2);
    t.equal(await store.compareAndSwap(key, 'again', 0), false, 'modRevision 0 fails when the key exists');
  });

  t.test('txn runs the success ops atomically when every compare holds', async (t) => {
    const root = space();
    await store.put(`${root}a`, 'A');
    await store.put(`${root}old/1`, 'x');
    await store.put(`${root}old/2`, 'x');
    await store.put(`${root}gone`, 'x');
    const a = (await store.get(`${root}a`))!;
    const result = await store.txn(
      [
        { key: `${root}a`, target: 'value', equals: 'A' },
        { key: `${root}a`, target: 'modRevision', equals: a.modRevision },
        { key: `${root}a`, target: 'createRevision', equals: a.createRevision },
        { key: `${root}a`, target: 'version', equals: 1 },
        { key: `${root}new`, target: 'createRevision', equals: 0 },
      ],
      [
        { op: 'put', key: `${root}new`, value: 'N' },
        { op: 'put', key: `${root}a`, value: 'A2' },
        { op: 'delete', key: `${root}gone` },
        { op: 'deletePrefix', prefix: `${root}old/` },
      ],
      [{ op: 'put', key: `${root}failed`, value: 'F' }],
    );
    t.equal(result.succeeded, true);
    const kvs = await store.list(root);
    t.same(kvs.map((kv) => [kv.key, kv.value]), [[`${root}a`, 'A2'], [`${root}new`, 'N']]);
    t.ok(kvs.every((kv) => kv.modRevision === result.revision), 'every op of the txn lands in one revision, the one returned');
  });

  t.test('txn runs the failure ops when any compare fails', async (t) => {
    const root = space();
    await store.put(`${root}a`, 'A');
    const a = (await store.get(`${root}a`))!;
    const cases = [
      { key: `${root}a`, target: 'value', equals: 'not A' },
      { key: `${root}a`, target: 'modRevision', equals: a.modRevision + 1000 },
      { key: `${root}a`, target: 'createRevision', equals: 0 },
      { key: `${root}missing`, target: 'value', equals: '' },
      { key: `${root}missing`, target: 'version', equals: 1 },
    ] as const;
    for (const compare of cases) {
      const result = await store.txn([compare], [{ op: 'put', key: `${root}a`, value: 'changed' }], [{ op: 'put', key: `${root}failure`, value: compare.target }]);
      t.equal(result.succeeded, false, `${compare.target} compare on ${compare.key} fails`);
      t.equal((await store.get(`${root}failure`))?.modRevision, result.revision, 'the failure branch ran at the returned revision');
    }
    t.equal((await store.get(`${root}a`))?.value, 'A', 'the success branch never ran');
  });

  t.test('a key under a lease without keep-alive vanishes after the TTL, as a delete event', async (t) => {
    const root = space();
    const watched = recorder();
    const watch = await store.watchPrefix(root, watched.onEvent);
    t.teardown(() => watch.close());
    const lease = await store.grantLease(1, { autoKeepAlive: false });
    let lost = 0;
    lease.onLost(() => lost++);
    await store.put(`${root}leased`, 'v', { lease: lease.id });
    await store.put(`${root}plain`, 'v');
    t.equal((await store.get(`${root}leased`))?.lease, lease.id, 'the key names its lease');
    t.equal((await store.get(`${root}plain`))?.lease, undefined, 'a plain key has no lease');
    const start = Date.now();
    await waitFor(absent(store, `${root}leased`), 6000, { what: 'leased key to expire' });
    t.ok(Date.now() - start >= 500, `expired after ${Date.now() - start} ms, not at once`);
    t.ok(await store.get(`${root}plain`), 'the plain key stays');
    await watched.waitCount(3);
    t.same(watched.events.map((e) => [e.type, e.key]), [['put', `${root}leased`], ['put', `${root}plain`], ['delete', `${root}leased`]]);
    await t.rejects(lease.keepAliveOnce(), 'an expired lease cannot be kept alive');
    await waitFor(() => lost === 1, 2000, { what: 'onLost' });
    await sleep(100);
    t.equal(lost, 1, 'onLost fires once');
    await t.rejects(store.put(`${root}late`, 'v', { lease: lease.id }), 'writing under an expired lease fails');
  });

  t.test('a kept-alive lease keeps its keys past the TTL', async (t) => {
    const root = space();
    const auto = await store.grantLease(1);
    const manual = await store.grantLease(2, { autoKeepAlive: false });
    t.teardown(() => auto.revoke());
    await store.put(`${root}auto`, 'v', { lease: auto.id });
    await store.put(`${root}manual`, 'v', { lease: manual.id });
    await sleep(1200);
    await manual.keepAliveOnce();
    await sleep(1300);
    t.ok(await store.get(`${root}manual`), 'keepAliveOnce renewed the TTL (2.5 s after the grant with TTL 2)');
    await sleep(700);
    t.ok(await store.get(`${root}auto`), 'automatic keep-alive holds the key 3 s with TTL 1');
    await waitFor(absent(store, `${root}manual`), 5000, { what: 'the unrenewed key to expire' });
  });

  t.test('revoking a lease deletes its keys at once', async (t) => {
    const root = space();
    const lease = await store.grantLease(10);
    let lost = 0;
    lease.onLost(() => lost++);
    await store.put(`${root}a`, 'v', { lease: lease.id });
    await store.put(`${root}b`, 'v', { lease: lease.id });
    await lease.revoke();
    t.same(await store.list(root), []);
    await lease.revoke(); // idempotent
    await sleep(50);
    t.equal(lost, 0, 'revoking your own lease is not a loss');
  });

  t.test('a put without a lease detaches the key from its lease', async (t) => {
    const root = space();
    const lease = await store.grantLease(10);
    await store.put(`${root}a`, 'leased', { lease: lease.id });
    await store.put(`${root}a`, 'plain');
    await lease.revoke();
    t.equal((await store.get(`${root}a`))?.value, 'plain');
  });

  t.test('a prefix watch delivers puts and deletes in revision order, and nothing outside the prefix', async (t) => {
    const root = space();
    await store.put(`${root}w/before`, 'old');
    const watched = recorder();
    const watch = await store.watchPrefix(`${root}w/`, watched.onEvent);
    t.teardown(() => watch.close());
    const r1 = await store.put(`${root}w/a`, '1');
    const r2 = await store.put(`${root}w/b`, '2');
    await store.put(`${root}wx`, 'sibling');
    await store.put(`${root}other/a`, 'other');
    const { revision: r4 } = await store.txn([], [{ op: 'delete', key: `${root}w/a` }]);
    const { revision: r5 } = await store.txn([], [
      { op: 'put', key: `${root}w/c`, value: '3' },
      { op: 'put', key: `${root}w/d`, value: '4' },
    ]);
    await watched.waitCount(5);
    await sleep(100);
    t.same(watched.events, [
      { type: 'put', key: `${root}w/a`, value: '1', modRevision: r1 },
      { type: 'put', key: `${root}w/b`, value: '2', modRevision: r2 },
      { type: 'delete', key: `${root}w/a`, modRevision: r4 },
      { type: 'put', key: `${root}w/c`, value: '3', modRevision: r5 },
      { type: 'put', key: `${root}w/d`, value: '4', modRevision: r5 },
    ]);
  });

  t.test('events reach the watcher after the write call, not inside it', async (t) => {
    const root = space();
    const watched = recorder();
    const watch = await store.watchPrefix(root, watched.onEvent);
    t.teardown(() => watch.close());
    const pending = store.put(`${root}a`, 'v');
    const seenDuringPut = watched.events.length;
    await pending;
    await watched.waitCount(1);
    t.equal(seenDuringPut, 0);
  });

  t.test('a watch with fromRevision replays past events, then continues live', async (t) => {
    const root = space();
    const r1 = await store.put(`${root}a`, '1');
    const r2 = await store.put(`${root}b`, '2');
    const r3 = (await store.txn([], [{ op: 'delete', key: `${root}a` }])).revision;
    const all = recorder();
    const fromStart = await store.watchPrefix(root, all.onEvent, { fromRevision: r1 });
    t.teardown(() => fromStart.close());
    const later = recorder();
    const fromMiddle = await store.watchPrefix(root, later.onEvent, { fromRevision: r2 });
    t.teardown(() => fromMiddle.close());
    await all.waitCount(3);
    const r4 = await store.put(`${root}c`, '3');
    await all.waitCount(4);
    await later.waitCount(3);
    t.same(all.events, [
      { type: 'put', key: `${root}a`, value: '1', modRevision: r1 },
      { type: 'put', key: `${root}b`, value: '2', modRevision: r2 },
      { type: 'delete', key: `${root}a`, modRevision: r3 },
      { type: 'put', key: `${root}c`, value: '3', modRevision: r4 },
    ]);
    t.same(later.events.map((e) => e.modRevision), [r2, r3, r4]);
  });

  t.test('a closed watch delivers nothing more', async (t) => {
    const root = space();
    const watched = recorder();
    const watch = await store.watchPrefix(root, watched.onEvent);
    await store.put(`${root}a`, '1');
    await watched.waitCount(1);
    await watch.close();
    await store.put(`${root}b`, '2');
    await sleep(300);
    t.equal(watched.events.length, 1);
  });

  t.test('dbSize counts at least the live records (a store may compact what was overwritten)', async (t) => {
    const root = space();
    for (let i = 0; i < 8; i++) await store.put(`${root}${i}`, 'x'.repeat(512 * 1024));
    const bytes = await store.dbSize();
    t.ok(bytes >= 4 * 1024 * 1024, `4 MiB live: ${bytes} bytes on disk`);
    await store.deletePrefix(root);
  });

  t.test('ping resolves while the store is up', async (t) => {
    await t.resolves(store.ping());
    t.match(store.description, /^(etcd|embedded) /);
  });

  t.test('LeasedKeys writes its keys under one lease and close() deletes them at once', async (t) => {
    const root = space();
    // A 3 s lease, kept alive every second: a 2 s lease lost its keys when a loaded machine (a
    // benchmark saturating both cores beside this suite) delayed one keep-alive by over 1.3 s.
    const keys = await LeasedKeys.start(store, 3);
    await keys.set(`${root}a`, 'A');
    await keys.set(`${root}b`, 'B');
    const a = await store.get(`${root}a`);
    t.equal(a?.value, 'A');
    t.ok(a?.lease, 'written under a lease');
    t.equal(a?.lease, keys.leaseId);
    t.equal((await store.get(`${root}b`))?.lease, a?.lease, 'both keys share the lease');
    await keys.set(`${root}a`, 'A2');
    t.equal((await store.get(`${root}a`))?.value, 'A2', 'set overwrites');
    await keys.remove(`${root}b`);
    t.equal(await store.get(`${root}b`), undefined, 'remove deletes the key');
    await sleep(3500);
    t.ok(await store.get(`${root}a`), 'the lease is kept alive past its TTL');
    await keys.close();
    t.same(await store.list(root), [], 'close revokes the lease: keys gone at once');
  });

  t.test('LeasedKeys close({ revoke: false }) leaves the keys to the lease TTL: they stay, then go', async (t) => {
    const root = space();
    const keys = await LeasedKeys.start(store, 2);
    await keys.set(`${root}a`, 'A');
    await keys.close({ revoke: false });
    t.equal((await store.get(`${root}a`))?.value, 'A', 'the key outlives close');
    await waitFor(absent(store, `${root}a`), 6000, { what: 'the released lease to expire' });
  });

  t.test('LeasedKeys writes keys set together in one transaction of at most 100 keys', async (t) => {
    const root = space();
    const keys = await LeasedKeys.start(store, 5);
    t.teardown(() => keys.close());
    const names = (count: number, tag: string) => Array.from({ length: count }, (_, i) => `${root}${tag}${String(i).padStart(3, '0')}`);
    const revisionsOf = async (prefix: string) => new Set((await store.list(prefix)).map((kv) => kv.modRevision));
    await Promise.all(names(10, 'ten/').map((key) => keys.set(key, 'running')));
    t.equal((await store.list(`${root}ten/`)).length, 10);
    t.equal((await revisionsOf(`${root}ten/`)).size, 1, 'ten keys set together: one revision');
    await Promise.all(names(150, 'many/').map((key) => keys.set(key, 'v')));
    t.equal((await store.list(`${root}many/`)).length, 150);
    t.equal((await revisionsOf(`${root}many/`)).size, 2, '150 keys: two transactions');
    await Promise.all([...names(5, 'ten/').map((key) => keys.remove(key)), keys.set(`${root}ten/new`, 'n')]);
    t.equal((await store.list(`${root}ten/`)).length, 6, 'removals and a set in one go');
  });
}

t.test('embedded store', { buffered: true }, async (t) => {
  const dir = tempDir();
  const store = await openStore({ dataDir: dir });
  t.ok(store instanceof EmbeddedStore, 'openStore without etcd URLs opens the embedded store');
  t.teardown(() => store.close());
  t.test('contract', async (t) => contract(t, store));

  t.test('data survives close and reopen, with its revisions', async (t) => {
    const dir = tempDir();
    const first = await EmbeddedStore.open(dir);
    await first.put('/a', '1');
    await first.put('/a', '2');
    await first.put('/b', 'x');
    await first.delete('/b');
    await first.txn([], [{ op: 'put', key: '/c', value: '3' }, { op: 'put', key: '/d', value: '4' }]);
    const before = await first.list('/');
    const lastRevision = await first.put('/e', '5');
    await first.close();
    const second = await EmbeddedStore.open(dir);
    t.teardown(() => second.close());
    t.same((await second.list('/')).slice(0, 3), before);
    t.equal((await second.get('/e'))?.modRevision, lastRevision);
    t.ok((await second.put('/f', '6')) > lastRevision, 'the revision continues after a reopen');
  });

  t.test('leased keys are gone after a reopen; plain keys stay', async (t) => {
    const dir = tempDir();
    const first = await EmbeddedStore.open(dir);
    const lease = await first.grantLease(60);
    await first.put('/leased', 'v', { lease: lease.id });
    await first.put('/plain', 'v');
    await first.close();
    const second = await EmbeddedStore.open(dir);
    t.teardown(() => second.close());
    t.equal(await second.get('/leased'), undefined);
    t.equal((await second.get('/plain'))?.value, 'v');
  });

  t.test('a second open of the same data directory fails while the first is open', async (t) => {
    const dir = tempDir();
    const first = await EmbeddedStore.open(dir);
    await t.rejects(EmbeddedStore.open(dir), /already in use by this process/);
    const other = spawnSync(process.execPath, ['--input-type=module', '-e', `
      const { EmbeddedStore } = await import(${JSON.stringify(new URL('../../src/store/embedded-store.js', import.meta.url).href)});
      await EmbeddedStore.open(${JSON.stringify(dir)});`], { encoding: 'utf8' });
    t.not(other.status, 0, 'another process cannot open it');
    t.match(other.stderr, new RegExp(`already in use by process ${process.pid}`));
    await first.close();
    const again = await EmbeddedStore.open(dir);
    await again.close();
  });

  t.test('a lock left by a dead process is taken over', async (t) => {
    const dir = tempDir();
    const dead = spawnSync(process.execPath, ['-e', '']).pid;
    writeFileSync(join(dir, 'store.lock'), `${dead}\n`);
    const store = await EmbeddedStore.open(dir);
    t.teardown(() => store.close());
    t.ok(await store.put('/k', 'v'));
  });

  t.test('a torn last log line (crash mid-write) is ignored on open', async (t) => {
    const dir = tempDir();
    const first = await EmbeddedStore.open(dir);
    await first.put('/kept', 'v');
    await first.close();
    writeFileSync(join(dir, 'store.log.jsonl'), '{"revision":99,"changes":[{"type":"put","ke', { flag: 'a' });
    const second = await EmbeddedStore.open(dir);
    t.teardown(() => second.close());
    t.equal((await second.get('/kept'))?.value, 'v');
    t.equal((await second.list('/')).length, 1);
  });

  t.test('a growing log is compacted into a snapshot without losing data', async (t) => {
    const dir = tempDir();
    const first = await EmbeddedStore.open(dir);
    const big = 'x'.repeat(1024 * 1024);
    for (let i = 0; i < 5; i++) await first.put(`/big/${i}`, `${i}${big}`);
    await first.put('/small', 'after');
    t.ok(statSync(join(dir, 'store.log.jsonl')).size < 2 * 1024 * 1024, 'the log was cut after passing 4 MB');
    await first.close();
    const second = await EmbeddedStore.open(dir);
    t.teardown(() => second.close());
    t.equal((await second.list('/big/')).length, 5);
    t.equal((await second.get('/big/4'))?.value.slice(0, 2), '4x');
    t.equal((await second.get('/small'))?.value, 'after');
  });

  t.test('a watch from a revision before the kept history fails clearly', async (t) => {
    const dir = tempDir();
    const first = await EmbeddedStore.open(dir);
    await first.put('/a', '1');
    await first.close();
    const second = await EmbeddedStore.open(dir);
    t.teardown(() => second.close());
    await t.rejects(second.watchPrefix('/', () => undefined, { fromRevision: 1 }), /keeps events from revision/, 'history starts at the reopen');
    // Concurrent writes share fsyncs, so 12,000 of them are quick.
    const revisions = await Promise.all(Array.from({ length: 12_000 }, (_, i) => second.put(`/many/${i % 100}`, String(i))));
    const last = Math.max(...revisions);
    await t.rejects(second.watchPrefix('/', () => undefined, { fromRevision: last - 11_500 }), /keeps events from revision/, 'far beyond the last 10,000 events');
    const recent = recorder();
    const watch = await second.watchPrefix('/many/', recent.onEvent, { fromRevision: last - 99 });
    t.teardown(() => watch.close());
    await recent.waitCount(100);
    t.same(recent.events.map((e) => e.modRevision), Array.from({ length: 100 }, (_, i) => last - 99 + i), 'recent revisions replay in order');
  });

  t.test('calls after close fail with StoreUnavailableError', async (t) => {
    const store = await EmbeddedStore.open(tempDir());
    await store.close();
    await t.rejects(store.get('/a'), StoreUnavailableError);
    await t.rejects(store.ping(), StoreUnavailableError);
  });
});

t.test('etcd store', { buffered: true }, async (t) => {
  const etcd: EtcdProcess = await startEtcd();
  t.teardown(() => etcd.stop());
  const store = await openStore({ etcd: [etcd.url], dataDir: '' });
  t.ok(store instanceof EtcdStore, 'openStore with etcd URLs opens an EtcdStore');
  t.teardown(() => store.close());
  t.test('contract', async (t) => contract(t, store));

  t.test('LeasedKeys writes its keys again when its lease is revoked elsewhere', async (t) => {
    const keys = await LeasedKeys.start(store, 2);
    t.teardown(() => keys.close());
    await keys.set('/revoked-elsewhere/a', 'A');
    const first = keys.leaseId!;
    const admin = new Etcd3({ hosts: etcd.url });
    t.teardown(() => admin.close());
    await admin.leaseClient.leaseRevoke({ ID: first });
    const back = await waitFor(async () => {
      const kv = await store.get('/revoked-elsewhere/a');
      return kv && kv.lease !== first ? kv : undefined;
    }, 5000, { what: 'the key under a new lease' });
    t.equal(back.value, 'A');
    t.equal(back.lease, keys.leaseId);
  });

  t.test('after an etcd restart a watch still delivers and leased keys stay', async (t) => {
    const watched = recorder();
    const watch = await store.watchPrefix('/restart/', watched.onEvent);
    t.teardown(() => watch.close());
    const keys = await LeasedKeys.start(store, 2);
    t.teardown(() => keys.close());
    await keys.set('/restart/leased', 'L');
    await watched.waitCount(1);
    await etcd.restart();
    const revision = await waitFor(() => store.put('/restart/after', 'A'), 10_000, { what: 'a write after the restart' });
    await watched.waitCount(2, 10_000);
    t.same(watched.events.at(-1), { type: 'put', key: '/restart/after', value: 'A', modRevision: revision });
    await sleep(3000);
    t.equal((await store.get('/restart/leased'))?.value, 'L', 'the leased key outlives its TTL after the restart');
  });

  t.test('while etcd is down calls fail fast; once back after more than the TTL, LeasedKeys rewrites its keys', async (t) => {
    const keys = await LeasedKeys.start(store, 1);
    t.teardown(() => keys.close());
    await keys.set('/outage/a', 'A');
    const oldLease = keys.leaseId;
    t.equal((await store.get('/outage/a'))?.lease, oldLease);
    await etcd.kill();
    const started = Date.now();
    await t.rejects(store.get('/outage/a'), StoreUnavailableError);
    await t.rejects(store.ping(), StoreUnavailableError);
    t.ok(Date.now() - started < 3500, `failed within ${Date.now() - started} ms`);
    await t.resolves(keys.set('/outage/b', 'B'), 'set does not throw while the store is down');
    await sleep(Math.max(0, 3000 - (Date.now() - started)));
    await etcd.restart();
    const back = await waitFor(async () => {
      const kv = await store.get('/outage/a');
      return kv && kv.lease !== oldLease ? kv : undefined;
    }, 15_000, { what: 'the key under a new lease' });
    t.equal(back.value, 'A');
    t.equal(back.lease, keys.leaseId);
    await waitFor(async () => (await store.get('/outage/b'))?.value === 'B', 5000, { what: 'the key set during the outage' });
    await sleep(2500);
    t.equal((await store.get('/outage/a'))?.value, 'A', 'the new lease is kept alive');
  });
});
