import t from 'tap';
import Docker from 'dockerode';
import { lastLines } from '../../src/roles/agent/last-output.js';
import { demultiplexedText } from '../../src/roles/agent/log-follower.js';

// A failed unit's kept output: Docker's frames read back as text, and the last lines kept within
// a count and a byte budget.

const frame = (stream: 1 | 2, text: string): Buffer => {
  const payload = Buffer.from(text);
  const header = Buffer.alloc(8);
  header[0] = stream;
  header.writeUInt32BE(payload.length, 4);
  return Buffer.concat([header, payload]);
};

// No engine is reached: only the client's frame reader (docker-modem's demuxStream) is used.
const docker = new Docker({ socketPath: '/nonexistent/docker.sock' });
const demultiplexed = (raw: Buffer): Promise<string> => demultiplexedText(docker, raw);

t.test('frames of stdout and stderr are read back in the order written', async (t) => {
  t.equal(await demultiplexed(Buffer.concat([frame(1, 'one\n'), frame(2, 'two\n'), frame(1, 'three\n')])), 'one\ntwo\nthree\n');
});

t.test("a run's last words without a newline end their line: the next run's first line, restarted in place, is not glued to them", async (t) => {
  const runs = Buffer.concat([frame(1, 'T1 line 3000\n'), frame(1, 'T2 last words of run 1'), frame(1, 'T3 line 1\n'), frame(2, 'T4 last words of run 2')]);
  t.equal(await demultiplexed(runs), 'T1 line 3000\nT2 last words of run 1\nT3 line 1\nT4 last words of run 2\n');
  t.same(lastLines(await demultiplexed(runs), { maxLines: 2, maxBytes: 1024 }).lines, ['T3 line 1', 'T4 last words of run 2']);
});

t.test('raw text (a TTY container) is taken as it is; a last frame cut short is left out', async (t) => {
  t.equal(await demultiplexed(Buffer.from('plain text\n')), 'plain text\n');
  t.equal(await demultiplexed(Buffer.concat([frame(2, 'whole\n'), frame(1, 'cut short').subarray(0, 12)])), 'whole\n');
  t.equal(await demultiplexed(Buffer.alloc(0)), '');
});

t.test('the last lines are kept, oldest first, and cutting older ones says so', async (t) => {
  const text = Array.from({ length: 150 }, (_, i) => `line ${i + 1}`).join('\n') + '\n';
  const kept = lastLines(text, { maxLines: 100, maxBytes: 16 * 1024 });
  t.equal(kept.lines.length, 100);
  t.equal(kept.lines[0], 'line 51');
  t.equal(kept.lines.at(-1), 'line 150');
  t.equal(kept.truncated, true);
  t.same(lastLines('a\nb\n', { maxLines: 100, maxBytes: 100 }), { lines: ['a', 'b'], truncated: false });
  t.same(lastLines('', { maxLines: 100, maxBytes: 100 }), { lines: [], truncated: false });
});

t.test('the bytes kept never exceed the budget: newest lines first, a long last line keeps its end', async (t) => {
  const lines = Array.from({ length: 50 }, (_, i) => `${String(i).padStart(2, '0')}${'x'.repeat(98)}`);
  const kept = lastLines(lines.join('\n'), { maxLines: 100, maxBytes: 1024 });
  t.ok(Buffer.byteLength(kept.lines.join('\n')) + 1 <= 1024);
  t.equal(kept.lines.length, 10);
  t.equal(kept.lines.at(-1), lines.at(-1));
  t.equal(kept.truncated, true);

  const long = lastLines(`start ${'é'.repeat(2000)} the error`, { maxLines: 100, maxBytes: 1024 });
  t.equal(long.lines.length, 1);
  t.ok(long.lines[0]?.endsWith('the error'));
  t.ok(Buffer.byteLength(long.lines[0] ?? '') <= 1023);
  t.notOk(long.lines[0]?.includes('\uFFFD'), 'no character is split');
  t.equal(long.truncated, true);
});
