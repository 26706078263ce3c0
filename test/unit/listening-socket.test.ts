import t from 'tap';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { listenerOf, listeningInodes } from '../../src/roles/agent/listening-socket.js';

// The kernel's socket tables as /proc/<pid>/net/tcp and tcp6 print them (Linux 6.1).
const tcp = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 31337 1 0000000000000000 100 0 0 10 0
   1: 00000000:A1B2 00000000:0000 0A 00000000:00000000 00:00000000 00000000 65534        0 40001 1 0000000000000000 100 0 0 10 0
   2: 0100007F:A1B2 0100007F:D431 01 00000000:00000000 00:00000000 00000000 65534        0 40002 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:D431 0100007F:A1B2 06 00000000:00000000 03:00000DA4 00000000     0        0 0 3 0000000000000000
`;
const tcp6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:A1B2 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000 65534        0 40003 1 0000000000000000 100 0 0 10 0
`;

t.test('the LISTEN sockets on a port are read from both tables; connections and other ports are not', async (t) => {
  t.same([...listeningInodes(`${tcp}\n${tcp6}`, 0xa1b2)].sort(), ['40001', '40003'], 'v4 and v6 listeners, not the connection on the same port');
  t.same([...listeningInodes(tcp, 8080)], ['31337']);
  t.same([...listeningInodes(tcp, 0xd431)], [], 'a connection in TIME_WAIT (inode 0) is no listener');
  t.same([...listeningInodes('', 8080)], [], 'an empty table');
});

t.test('a container process that has exited but is not reaped yet (a zombie) holds no listener, whoever answers on the port', async (t) => {
  // Something answers on the port, as a process beside a crash-looping unit on host networking would.
  const other = createServer().listen(0, '127.0.0.1');
  await once(other, 'listening');
  t.teardown(() => other.close());
  const port = (other.address() as AddressInfo).port;
  // A parent that leaves its child unreaped for a while: the child is a zombie meanwhile, as a
  // container's first process is until its shim reaps it (Docker still reports it running then).
  const parent = spawn('python3', ['-c', 'import os, sys, time\npid = os.fork()\nif pid == 0: os._exit(1)\nprint(pid, flush=True)\ntime.sleep(30)'], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.teardown(() => parent.kill());
  const [line] = (await once(parent.stdout, 'data')) as [Buffer];
  const zombie = Number(line.toString().trim());
  const isZombie = async () => /\) Z /.test(await readFile(`/proc/${zombie}/stat`, 'utf8'));
  // The child exits right after the fork: wait for it to have done so.
  for (let waited = 0; waited < 5_000 && !(await isZombie()); waited += 20) await new Promise((resolve) => setTimeout(resolve, 20));
  t.ok(await isZombie(), 'the child is a zombie');
  t.equal(await listenerOf(zombie, 'f00dfeedcontainer', port), 'other', 'not `unseen` (which a unit would be trusted on): it listens nowhere');
});
