import t from 'tap';
import { RotationDedup, timestampNs } from '../../src/roles/agent/log-rotation-dedup.js';
import { sinceParameter } from '../../src/roles/agent/log-follower.js';

// A followed log passes each frame once, in order, without Docker's timestamp.

const frame = (at: string, text: string) => Buffer.from(`${at} ${text}`);

async function passed(frames: Buffer[]): Promise<string> {
  const dedup = new RotationDedup();
  const out: Buffer[] = [];
  dedup.on('data', (chunk: Buffer) => out.push(chunk));
  for (const f of frames) dedup.write(f);
  dedup.end();
  await new Promise((resolve) => dedup.once('end', resolve));
  return Buffer.concat(out).toString();
}

t.test("Docker's fixed-width timestamps read to nanoseconds; anything else is none", async (t) => {
  t.equal(timestampNs('2026-11-23T18:12:00.000000001Z'), 1795457520000000001n);
  t.equal(timestampNs('2026-11-23T18:12:00.5Z'), 1795457520500000000n, 'a short fraction is tenths');
  t.equal(timestampNs('2026-11-23T19:12:00.000000001+01:00'), 1795457520000000001n, 'an offset');
  for (const text of ['hello', '2026-11-23', '2026-11-23T18:12:00.0000000001Z', '']) t.equal(timestampNs(text), undefined, text);
});

t.test('frames re-read after a rotation are dropped; the rest pass in order without their timestamp', async (t) => {
  const out = await passed([
    frame('2026-11-23T18:12:00.000000001Z', 'one\n'),
    frame('2026-11-23T18:12:00.000000002Z', 'two\n'),
    frame('2026-11-23T18:12:00.000000001Z', 'one\n'),
    frame('2026-11-23T18:12:00.000000002Z', 'two\n'),
    frame('2026-11-23T18:12:00.000000003Z', 'three\n'),
  ]);
  t.equal(out, 'one\ntwo\nthree\n');
});

t.test('a frame without a timestamp passes as it is', async (t) => {
  t.equal(await passed([Buffer.from('plain text\n')]), 'plain text\n');
});

t.test("what a follower asks the engine again from: the newest frame passed, in Docker's `since` form", async (t) => {
  const dedup = new RotationDedup();
  dedup.resume();
  t.equal(dedup.newest, -1n);
  dedup.write(frame('2026-11-23T18:12:00.000000002Z', 'two\n'));
  dedup.write(frame('2026-11-23T18:12:00.000000001Z', 'one again\n'));
  t.equal(dedup.frames, 1, 'a repeated frame is not counted as news');
  t.equal(dedup.newest, 1795457520000000002n);
  t.equal(sinceParameter(dedup.newest), '1795457520.000000002');
  t.equal(sinceParameter(1795457520500000000n), '1795457520.500000000');
});
