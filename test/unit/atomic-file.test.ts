import t from 'tap';
import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeFileAtomically, writeFileDurably } from '../../src/atomic-file.js';

// A reader in another process (HAProxy reading its configuration) sees a whole version of the file
// or the one before, never a part, however it races the writer: the gateway's files, rewritten in
// place, were once read half-written ("Missing LF on last line", ci18).

const dir = mkdtempSync(join(tmpdir(), 'atomic-file-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

/** Version `n`: 1 MiB of its digit, then its end line, so a part of it is told from a whole. */
const version = (n: number): string => `${String(n % 10).repeat(1024 * 1024)}\nend ${n % 10}\n`;

t.test('a reader racing a second of rewrites only ever reads a whole version', async (t) => {
  const file = join(dir, 'haproxy.cfg');
  writeFileAtomically(file, version(0));
  const reader = spawn(
    process.execPath,
    [
      '-e',
      `const { readFileSync, existsSync } = require('node:fs');
       let reads = 0, torn = 0;
       console.log('reading');
       while (!existsSync(process.argv[2])) {
         const text = readFileSync(process.argv[1], 'utf8');
         reads += 1;
         const digit = text[0] ?? '';
         if (text !== digit.repeat(1024 * 1024) + '\\nend ' + digit + '\\n') torn += 1;
       }
       console.log(JSON.stringify({ reads, torn }));`,
      file,
      join(dir, 'stop'),
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let output = '';
  const reading = new Promise<void>((resolve) =>
    reader.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (output.startsWith('reading\n')) resolve();
    }),
  );
  await reading;
  // Rewrites for a second while the reader reads as fast as it can.
  const until = Date.now() + 1000;
  for (let n = 1; Date.now() < until; n += 1) {
    writeFileAtomically(file, version(n));
    await new Promise((resolve) => setImmediate(resolve));
  }
  writeFileAtomically(join(dir, 'stop'), '');
  await new Promise((resolve) => reader.once('exit', resolve));
  const { reads, torn } = JSON.parse(output.slice('reading\n'.length)) as { reads: number; torn: number };
  t.ok(reads > 0, `${reads} reads`);
  t.equal(torn, 0, 'no read saw part of a version');
});

t.test('its mode, and no temporary file left, also when the write fails', async (t) => {
  const file = join(dir, 'secret.pem');
  writeFileAtomically(file, 'key\n', { mode: 0o600 });
  t.equal(statSync(file).mode & 0o777, 0o600);
  t.throws(() => writeFileAtomically(join(dir, 'missing', 'file'), 'x'), /ENOENT/);
  t.same(readdirSync(dir).filter((name) => name.startsWith('.')), [], 'no .<name>.<pid>.<random> left');
});

t.test('the durable write: a file others could read is replaced by one only its owner reads, whole', async (t) => {
  const file = join(dir, 'admin-token');
  writeFileSync(file, 'old\n');
  chmodSync(file, 0o644);
  await writeFileDurably(file, 'new\n', { mode: 0o600 });
  t.equal(readFileSync(file, 'utf8'), 'new\n');
  t.equal(statSync(file).mode & 0o777, 0o600, 'a new file, not the old one written into');
  await t.rejects(writeFileDurably(join(dir, 'missing', 'file'), 'x'), /ENOENT/);
  t.same(readdirSync(dir).filter((name) => name.startsWith('.')), [], 'no temporary file left');
});
