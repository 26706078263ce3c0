import t from 'tap';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

// A test file that tap ends at its timeout still runs the harness's 'exit' handlers, which stop
// what it started (test/harness/exit-on-signal.ts): in CI a timed-out upgrade.test left etcd, two
// engines, HAProxy and eight roles running.

const projectRoot = fileURLToPath(new URL('../../../', import.meta.url));

t.test('a file ended by tap at its timeout stops the processes it started', async (t) => {
  const run = spawnSync('npx', ['tap', '--reporter=tap', '--timeout=2', 'dist/test/fixtures/timed-out-child.js'], { cwd: projectRoot, encoding: 'utf8', timeout: 60_000 });
  const pid = Number(/# child (\d+)/.exec(run.stdout)?.[1]);
  t.ok(pid > 0, 'the fixture started its child');
  t.match(run.stdout, /timeout!/, 'tap ended the file at its timeout');
  await new Promise((resolve) => setTimeout(resolve, 200));
  // Killed, it may stay a zombie: its parent exited and this machine's PID 1 may not reap.
  const stat = existsSync(`/proc/${pid}/stat`) ? readFileSync(`/proc/${pid}/stat`, 'utf8') : '';
  const alive = stat !== '' && !/\) [ZX] /.test(stat);
  if (alive) process.kill(pid, 'SIGKILL');
  t.notOk(alive, 'the child is gone');
});
