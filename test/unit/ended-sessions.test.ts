import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import { EndedSessions } from '../../src/auth/ended-sessions.js';
import { endedSessionKey, endedSessionPrefix } from '../../src/store/keys.js';
import type { SessionClaims } from '../../src/auth/session.js';

// The bounds of ended-session records on the embedded store (the same Store interface as etcd),
// with small limits: all tokens together, records dropped once their session is over, and
// records written before they named their token.

const dir = mkdtempSync(join(tmpdir(), 'ended-sessions-'));
const store = await EmbeddedStore.open(dir);
const ended = await EndedSessions.start(store, { perToken: 2, total: 3 });
t.teardown(async () => {
  await ended.close();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const now = Date.parse('2030-01-01T00:00:00Z');
let serial = 0;
/** A session of `token` ending `minutes` after now, with an id of the sealed form. */
const session = (token: string, minutes = 60): SessionClaims => ({
  id: `session-${String((serial += 1)).padStart(14, '0')}`,
  token,
  hash: 'h',
  expiresAt: now + minutes * 60_000,
});
const count = async () => (await store.list(endedSessionPrefix)).length;
/** Waits until the watched records hold the session `id`: end() reads them. */
const watched = async (id: string) => {
  while (!ended.has(id)) await new Promise((resolve) => setImmediate(resolve));
};

t.test('every token together keeps at most the total: the next sign-out is refused 429 and adds nothing', async (t) => {
  const first = session('a', 1);
  const last = session('c');
  for (const claims of [first, session('b'), last]) await ended.end(claims, now);
  await watched(last.id);
  await t.rejects(ended.end(session('d'), now), { statusCode: 429, message: /^3 signed-out sessions have not expired yet, the most the platform keeps/ });
  t.equal(await count(), 3);
  t.ok(ended.has(first.id), 'the first is recorded');
  // Once the first session is over, its record is dropped and makes room.
  await ended.end(session('d'), now + 2 * 60_000);
  t.equal(await count(), 3, 'one dropped, one added');
  t.notOk(await store.get(endedSessionKey(first.id)), 'the record of the session that is over');
});

t.test('a session already over leaves no record, and a record of the older form (the time only) is read and dropped when over', async (t) => {
  const before = await count();
  await ended.end(session('e', -1), now);
  t.equal(await count(), before, 'a session over needs no record');
  const legacy = 'legacy-session-0000000';
  await store.put(endedSessionKey(legacy), new Date(now + 60_000).toISOString());
  await watched(legacy);
  // An hour later every session so far is over: their records, the older one's too, are dropped.
  const later = session('f', 120);
  await ended.end(later, now + 61 * 60_000);
  t.notOk(await store.get(endedSessionKey(legacy)), 'the older record, over, is dropped');
  t.equal(await count(), 1, 'only the new record is left');
});
