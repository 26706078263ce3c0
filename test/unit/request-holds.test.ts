import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EmbeddedStore } from '../../src/store/embedded-store.js';
import { requestHoldRoot } from '../../src/store/keys.js';
import { deleteEndedRequestHolds, holdRequests, releaseRequests } from '../../src/store/records/request-holds.js';

// The request holds a handover writes: one per service, released by the scheduler, and deleted by
// housekeeping once ended when a leader died before it released one.

const dir = mkdtempSync(join(tmpdir(), 'request-holds-'));
const store = await EmbeddedStore.open(dir);
t.teardown(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const hold = (service: string, until: number) => ({
  service,
  deployment: 'd1',
  unit: `${service}-1.service`,
  since: new Date(until - 30_000).toISOString(),
  until: new Date(until).toISOString(),
});
const heldServices = async () => (await store.list(requestHoldRoot)).map((kv) => JSON.parse(kv.value).service as string).sort();

t.test('a hold per service, replaced when written again, gone when released', async (t) => {
  await holdRequests(store, hold('db', Date.now() + 30_000));
  await holdRequests(store, hold('db', Date.now() + 60_000));
  t.same(await heldServices(), ['db']);
  await releaseRequests(store, 'db');
  t.same(await heldServices(), []);
  await releaseRequests(store, 'db');
});

t.test('housekeeping deletes the holds that have ended and keeps those under way', async (t) => {
  const now = Date.now();
  await holdRequests(store, hold('ended', now - 1));
  await holdRequests(store, hold('current', now + 30_000));
  t.equal(await deleteEndedRequestHolds(store, now), 1);
  t.same(await heldServices(), ['current']);
  await releaseRequests(store, 'current');
});
