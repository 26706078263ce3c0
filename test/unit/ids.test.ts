import t from 'tap';
import { sortAfter, timeOrderedId } from '../../src/roles/scheduler/ids.js';

// Deployment and journal ids: their key order is the order records were made in.

t.test('ids made in one millisecond still increase', async (t) => {
  const ids = Array.from({ length: 500 }, () => timeOrderedId());
  t.same([...ids].sort(), ids);
  t.equal(new Set(ids).size, ids.length);
});

t.test("after an earlier leader's id from the future (its clock ahead), new ids sort after it", async (t) => {
  const ahead = `${(Date.now() + 3_600_000).toString(36).padStart(9, '0')}-abcdef01`;
  sortAfter(ahead);
  const next = timeOrderedId();
  t.ok(next > ahead, `${next} sorts after ${ahead}`);
  sortAfter('not-an-id');
  t.ok(timeOrderedId() > next, 'a malformed id changes nothing');
});
