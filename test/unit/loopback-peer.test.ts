import t from 'tap';
import { containerOfCgroup, peerOfSsLine } from '../../src/auth/loopback-peer.js';

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
