import t from 'tap';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

// A test file that tap ends at its timeout still runs the harness's 'exit' handlers, which stop
// what it started (test/harness/exit-on-signal.ts): in CI a timed-out upgrade.test left etcd, two
// engines, HAProxy and eight roles running.

const projectRoot = fileURLToPath(new URL('../../../', import.meta.url));

/** Whether a process runs: killed, it may stay a zombie, its parent gone and this machine's PID 1 not reaping. Killed if so, to leave nothing behind. */
function stillRunning(pid: number): boolean {
  const stat = existsSync(`/proc/${pid}/stat`) ? readFileSync(`/proc/${pid}/stat`, 'utf8') : '';
  const alive = stat !== '' && !/\) [ZX] /.test(stat);
  if (alive) process.kill(pid, 'SIGKILL');
  return alive;
}

const childPid = (stdout: string): number => Number(/# child (\d+)/.exec(stdout)?.[1]);

t.test('a file ended by tap at its timeout stops the processes it started', async (t) => {
  // The fixture sets its own timeout of a second once its child runs; the 60 s only bounds a
  // Node start slowed by a loaded machine, which a 2 s timeout from the spawn once cut short.
  const run = spawnSync('npx', ['tap', '--reporter=tap', '--timeout=60', 'dist/test/fixtures/timed-out-child.js'], { cwd: projectRoot, encoding: 'utf8', timeout: 90_000 });
  const pid = childPid(run.stdout);
  t.ok(pid > 0, 'the fixture started its child', { stdout: run.stdout, stderr: run.stderr });
  t.match(run.stdout, /timeout!/, 'tap ended the file at its timeout');
  await new Promise((resolve) => setTimeout(resolve, 200));
  t.notOk(stillRunning(pid), 'the child is gone', { stdout: run.stdout, stderr: run.stderr });
});

t.test('a second SIGALRM before the first one\'s exit still runs the exit handlers', async (t) => {
  // ci20: tap's own SIGALRM and its parent's came closer than the report delay under load; the
  // second found no harness listener and killed the process with the signal's default action.
  const run = spawnSync(process.execPath, ['dist/test/fixtures/twice-alarmed-child.js'], { cwd: projectRoot, encoding: 'utf8', timeout: 60_000 });
  const pid = childPid(run.stdout);
  t.ok(pid > 0, 'the fixture started its child', { stdout: run.stdout, stderr: run.stderr });
  t.equal(run.status, 142, 'the process exited with the code a shell gives SIGALRM, from its own handler');
  await new Promise((resolve) => setTimeout(resolve, 200));
  t.notOk(stillRunning(pid), 'the child is gone');
});
