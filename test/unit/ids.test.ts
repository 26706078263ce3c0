import t from 'tap';
import { idTime, sortAfter, timeOrderedId } from '../../src/store/ids.js';

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
  t.equal(idTime(next), idTime(ahead)! + 1, 'and is the next millisecond');
});

t.test('a key that is not an id, or from further ahead than a day, moves nothing', async (t) => {
  const before = idTime(timeOrderedId())!;
  for (const stray of ['migration-x', 'zzzzzzzzz-x', 'zzzzzzzzz-abcdef01', `${(Date.now() + 2 * 86_400_000).toString(36)}-abcdef01`, '']) {
    t.equal(idTime(stray), undefined, `${JSON.stringify(stray)} is not an id`);
    sortAfter(stray);
  }
  t.equal(idTime(timeOrderedId()), before + 1, 'the next id follows the last one made');
});
