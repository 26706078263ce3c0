import { closeSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';

// Ports for the test's own listeners (etcd, registries, roles, HAProxy). The kernel's port 0 is no
// good for a port handed to another process to bind later: it is taken from the ephemeral range,
// where every outgoing connection of the machine also takes its source port, and where a second
// test file (tap runs two at once) is handed the same just-released port. Both happened in CI
// (etcd: "bind: address already in use" in restarts.test). So a port comes from below the
// ephemeral range (Linux: 32768 and up), where no connection is given one, and each is claimed
// with a file made exclusively in a directory every test process shares; a claim is released
// when its process exits, and one whose process has died is taken over.

const FIRST_PORT = 20_000;
const LAST_PORT = 32_000;
const CLAIMS_DIR = '/tmp/platform-test-ports';
const claimed = new Set<string>();
let exitHookInstalled = false;

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Claims `port` for this process; false when a live process holds it. */
export function claimPort(port: number): boolean {
  const path = join(CLAIMS_DIR, String(port));
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(path, 'wx');
      writeSync(fd, String(process.pid));
      closeSync(fd);
      claimed.add(path);
      return true;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const owner = Number(readFileSync(path, 'utf8').trim() || 0);
      // An owner that is still writing its pid (empty file) is alive; so is this process.
      if (owner === 0 || owner === process.pid || processAlive(owner)) return false;
      rmSync(path, { force: true });
    }
  }
  return false;
}

/** Whether nothing listens on `port` on any address of this network namespace. */
function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen({ host: '0.0.0.0', port, exclusive: true }, () => server.close(() => resolve(true)));
  });
}

/** A TCP port nothing listens on, below the ephemeral range, claimed for this test process until it exits. */
export async function freePort(): Promise<number> {
  mkdirSync(CLAIMS_DIR, { recursive: true, mode: 0o1777 });
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.on('exit', () => {
      for (const path of claimed) rmSync(path, { force: true });
    });
  }
  for (let attempt = 0; attempt < 1000; attempt++) {
    const port = FIRST_PORT + Math.floor(Math.random() * (LAST_PORT - FIRST_PORT + 1));
    if (!claimPort(port)) continue;
    if (await bindable(port)) return port;
  }
  throw new Error(`no free port between ${FIRST_PORT} and ${LAST_PORT} after 1000 tries (claims in ${CLAIMS_DIR})`);
}
