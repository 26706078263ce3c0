import t from 'tap';
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { claimPort, freePort } from '../harness/free-port.js';

// The test harness's ports (test/harness/free-port.ts): below the ephemeral range, never handed
// twice while their process lives, and taken over from a process that died.

t.test('ports come from below the ephemeral range, each once, claimed with this process id', async (t) => {
  const ports = await Promise.all(Array.from({ length: 50 }, () => freePort()));
  t.equal(new Set(ports).size, 50, 'no port handed out twice');
  const [low] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
  t.ok(ports.every((port) => port >= 20_000 && port < low!), `every port below ${low}`);
  t.equal(readFileSync(`/tmp/platform-test-ports/${ports[0]}`, 'utf8'), String(process.pid));
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(ports[1], '127.0.0.1', resolve));
  t.teardown(() => server.close());
  t.pass('a handed-out port binds');
});

t.test("a dead process's claim is taken over; a live one's never", async (t) => {
  const [deadOwners, liveOwners] = [await freePort(), await freePort()];
  writeFileSync(`/tmp/platform-test-ports/${deadOwners}`, String(spawnSync('true').pid));
  writeFileSync(`/tmp/platform-test-ports/${liveOwners}`, String(process.ppid));
  t.ok(claimPort(deadOwners), 'the port of a process that exited is claimed');
  t.equal(readFileSync(`/tmp/platform-test-ports/${deadOwners}`, 'utf8'), String(process.pid));
  t.notOk(claimPort(liveOwners), "a live process's port is not");
  writeFileSync(`/tmp/platform-test-ports/${liveOwners}`, String(process.pid));
});
