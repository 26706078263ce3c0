import t from 'tap';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EmbeddedStore } from '../../src/store/embedded-store.js';

// The embedded store's files hold the platform's secrets (the session key, registry logins, token
// hashes). Checked as a real unprivileged local user (`nobody`, through setpriv): it must not be
// able to list the data directory or read any file in it, for a new store and for one an older
// version left world-readable.

const NOBODY = ['--reuid=65534', '--regid=65534', '--clear-groups'];
const parent = mkdtempSync(join(tmpdir(), 'platform-store-files-'));
// mkdtemp makes the parent 0700; open it so only the store's own modes stand in nobody's way.
chmodSync(parent, 0o755);
t.teardown(() => rmSync(parent, { recursive: true, force: true }));

/** What `nobody` gets from reading `path` (a file's bytes, a directory's listing), or why not. */
function readAsNobody(path: string, directory = false): { status: number | null; output: string } {
  const result = spawnSync('setpriv', [...NOBODY, directory ? 'ls' : 'cat', path], { encoding: 'utf8' });
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}

async function storeWithSecret(dir: string): Promise<void> {
  const store = await EmbeddedStore.open(dir);
  await store.put('/platform/auth/session-key', 'the-session-key');
  await store.close();
}

const modeOf = (path: string): number => statSync(path).mode & 0o777;

function assertPrivate(t: Tap, dir: string): void {
  t.equal(modeOf(dir).toString(8), '700', 'the directory is its owner\'s only');
  const files = readdirSync(dir);
  t.ok(files.length >= 2, `the store's files: ${files.join(', ')}`);
  for (const file of files) {
    t.equal(modeOf(join(dir, file)).toString(8), '600', `${file} is its owner's only`);
    const read = readAsNobody(join(dir, file));
    t.not(read.status, 0, `nobody cannot read ${file}: ${read.output.trim()}`);
    t.notMatch(read.output, /the-session-key/);
  }
  t.not(readAsNobody(dir, true).status, 0, 'nobody cannot list the directory');
}

type Tap = Parameters<Parameters<typeof t.test>[0]>[0];

t.test('a new store\'s directory and files are readable by their owner only', async (t) => {
  const dir = join(parent, 'fresh');
  await storeWithSecret(dir);
  assertPrivate(t, dir);
});

t.test('a store directory left 0755 with 0644 files is corrected when it is opened', async (t) => {
  const dir = join(parent, 'older');
  await storeWithSecret(dir);
  chmodSync(dir, 0o755);
  for (const file of readdirSync(dir)) chmodSync(join(dir, file), 0o644);
  t.equal(readAsNobody(join(dir, 'store.log.jsonl')).status, 0, 'as an older version left it, nobody could read it');
  const reopened = await EmbeddedStore.open(dir);
  t.equal((await reopened.get('/platform/auth/session-key'))?.value, 'the-session-key', 'the data is intact');
  assertPrivate(t, dir);
  await reopened.close();
});
