import t, { type Test } from 'tap';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { containerOfCgroup, loopbackPeerOf, peerOfSsLine } from '../../src/auth/loopback-peer.js';

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
  t.match(peerOfSsLine('ESTAB 0 0 127.0.0.1:45492 127.0.0.1:45319 uid:1000 ino:43191 sk:1001 <->'), { unknown: /cgroup v2/ }, 'without a cgroup a unit cannot be told apart');
  t.match(peerOfSsLine('ESTAB 0 0 127.0.0.1:45492 127.0.0.1:45319 ino:43191 sk:1001 cgroup:unreachable:2f1a <->'), { unknown: /cgroup namespace/ }, 'nor from a cgroup namespace of its own');
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
