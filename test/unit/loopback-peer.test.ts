import t, { type Test } from 'tap';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { PortLookups, containerOfCgroup, endOfProcNet, loopbackPeerOf, peerOfSsLine, uidOfProcNetLine } from '../../src/auth/loopback-peer.js';

// Which process is behind a loopback connection, read from `ss -tnHe --cgroup`: the parts that
// tell a unit (any container) from the operator's own processes.

const ID = '0c934fce3f074132fac7c511e60113179ff0dc17d7377459533f5df1903c1bc2';

t.test("a container's cgroup names it, under every engine's layout; the host's own cgroups name none", async (t) => {
  for (const path of [
    `/docker/${ID}`, // cgroupfs driver
    `/system.slice/docker-${ID}.scope`, // systemd driver
    `/machine.slice/libpod-${ID}.scope/container`, // podman
    `/kubepods.slice/kubepods-burstable.slice/cri-containerd-${ID}.scope`,
  ]) {
    t.equal(containerOfCgroup(path), ID.slice(0, 12), path);
  }
  for (const path of ['/', '/user.slice/user-1000.slice/session-3.scope', '/system.slice/platform-orchestrator.service', `/docker/${ID.slice(1)}`]) {
    t.equal(containerOfCgroup(path), undefined, path);
  }
});

t.test("a socket line gives its owner's uid (root's when ss prints none) and its container", async (t) => {
  t.same(peerOfSsLine(`ESTAB 0 0 127.0.0.1:45492 127.0.0.1:45319 ino:43191 sk:1001 cgroup:/docker/${ID} <-> cgroup:/docker/${ID}`), { uid: 0, container: ID.slice(0, 12) });
  t.same(peerOfSsLine('ESTAB 0 0 127.0.0.1:45492 127.0.0.1:45319 uid:1000 ino:43191 sk:1001 cgroup:/user.slice/user-1000.slice <->'), { uid: 1000, container: undefined });
  t.match(
    peerOfSsLine('ESTAB 0 0 127.0.0.1:45492 127.0.0.1:45319 uid:1000 ino:43191 sk:1001 <->'),
    { uid: 1000, container: undefined, cgroupUnseen: /cgroup v2/ },
    'without a cgroup only the uid tells a unit apart',
  );
  t.match(
    peerOfSsLine('ESTAB 0 0 127.0.0.1:45492 127.0.0.1:45319 ino:43191 sk:1001 cgroup:unreachable:2f1a <->'),
    { uid: 0, container: undefined, cgroupUnseen: /cgroup namespace/ },
    'nor from a cgroup namespace of its own',
  );
});

/** `count` connections to a new loopback listener at `host`; the server's ends. */
async function connections(t: Test, host: string, count: number): Promise<Socket[]> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const accepted: Socket[] = [];
  const all = new Promise<Socket[]>((resolve) => server.on('connection', (socket) => accepted.push(socket) === count && resolve(accepted)));
  const clients = Array.from({ length: count }, () => connect((server.address() as AddressInfo).port, host));
  t.teardown(() => {
    for (const client of clients) client.destroy();
    server.close();
  });
  return all;
}

t.test('connections opened at once are each identified as this process, by one lookup at a time, over IPv4 and IPv6', async (t) => {
  for (const host of ['127.0.0.1', '::1']) {
    const sockets = await connections(t, host, 40);
    const identities = await Promise.all(sockets.map((socket) => loopbackPeerOf(socket)));
    t.same(new Set(identities.map((identity) => JSON.stringify(identity))), new Set([JSON.stringify({ uid: process.getuid!(), container: undefined })]), host);
    t.same(loopbackPeerOf(sockets[0]!), identities[0], 'kept on the connection');
  }
});

t.test("the kernel's socket table names both ends and the owner's uid, over IPv4, IPv6 and IPv4 mapped into IPv6", async (t) => {
  t.equal(endOfProcNet('0100007F:B1B4'), '127.0.0.1:45492');
  t.equal(endOfProcNet('00000000000000000000000001000000:1F90'), '::1:8080');
  t.equal(endOfProcNet('0000000000000000FFFF00000100007F:1F90'), '127.0.0.1:8080');
  const line = '   3: 0100007F:B1B4 0100007F:B0C7 01 00000000:00000000 00:00000000 00000000 65534        0 43191 1 0000000000000000 20 4 30 10 -1';
  t.equal(uidOfProcNetLine(line, '127.0.0.1:45492', '127.0.0.1:45255'), 65534);
  t.equal(uidOfProcNetLine(line, '127.0.0.1:45493', '127.0.0.1:45255'), undefined, 'another connection');
});

t.test('without ss (the container image has no iproute2) a caller is identified by its uid from /proc/net/tcp', async (t) => {
  const path = process.env.PATH;
  process.env.PATH = '/nonexistent';
  t.teardown(() => void (process.env.PATH = path));
  for (const host of ['127.0.0.1', '::1']) {
    const [socket] = await connections(t, host, 1);
    t.match(await loopbackPeerOf(socket!), { uid: process.getuid!(), container: undefined, cgroupUnseen: /ss \(iproute2\) failed/ }, host);
  }
});

t.test("a listing that skips a socket whose connection is still open is not the last word: the next listing is asked (seen at 1,000 units: 401 for the operator's own deploy)", async (t) => {
  const line = 'ESTAB 0 0 127.0.0.1:45492 127.0.0.1:45319 uid:1000 ino:43191 sk:1001 cgroup:/user.slice/user-1000.slice <->';
  // Listings as the kernel's dump gave them: the first one without the caller's socket.
  const listings: string[][] = [[], [line]];
  let asked = 0;
  const lookups = new PortLookups(45319, async () => listings[Math.min(asked++, listings.length - 1)]!);
  t.same(await lookups.lookUp('127.0.0.1:45492', '127.0.0.1:45319'), { uid: 1000, container: undefined }, 'found in the second listing');
  t.equal(asked, 2);

  asked = 0;
  const closed = new PortLookups(45319, async () => (asked++, []));
  t.same(await closed.lookUp('127.0.0.1:45492', '127.0.0.1:45319', () => false), { unknown: 'the caller’s socket is gone' }, 'a connection closed meanwhile: gone at the first miss');
  t.equal(asked, 1);

  asked = 0;
  const never = new PortLookups(45319, async () => (asked++, []));
  t.match(await never.lookUp('127.0.0.1:45492', '127.0.0.1:45319', () => true), { unknown: /in none of 3 listings/ }, 'an open connection missing from three listings is unknown');
  t.equal(asked, 3);
});
