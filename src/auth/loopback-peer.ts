import { execFile } from 'node:child_process';
import type { Socket } from 'node:net';

// Which process is behind a loopback connection. The peer address cannot tell the operator's
// shell from a unit on host networking: both share the host's loopback. The kernel knows more:
// the socket's owner uid and the cgroup of the process that opened it, which for a Docker
// container (any engine: docker, libpod, containerd, CRI-O) names the container's 64-hex id.
// `ss` (iproute2) asks the kernel's socket diagnostics for both of the caller's end of the
// connection; it needs no privileges, so a platform running as its own user can ask too.
//
// One lookup per connection, kept on the socket: a keep-alive client's further calls cost nothing.

export interface LoopbackPeer {
  /** The uid owning the caller's socket. */
  uid: number;
  /** The id of the container the caller runs in (12 hex digits, as `docker ps` shows it); undefined: none. */
  container: string | undefined;
}

/** Why the caller could not be identified: it is then treated as neither local nor anyone in particular. */
export interface UnknownPeer {
  unknown: string;
}

export type PeerIdentity = LoopbackPeer | UnknownPeer;

const CONTAINER_ID = /(?:^|[/-])([0-9a-f]{64})(?:\.scope)?(?:\/|$)/;

/** The container a cgroup path names, as Docker, Podman, containerd and CRI-O lay them out under cgroup v2 or v1. */
export function containerOfCgroup(path: string): string | undefined {
  return CONTAINER_ID.exec(path)?.[1]?.slice(0, 12);
}

/** The identity in one line of `ss -tnHe --cgroup`: `… uid:1000 ino:… sk:… cgroup:/… <-> …`. */
export function peerOfSsLine(line: string): PeerIdentity {
  const cgroup = /\bcgroup:(\S+)/.exec(line)?.[1];
  // Without the socket's cgroup (an old kernel, or cgroup v1 only) a container cannot be told from the host.
  if (cgroup === undefined) return { unknown: 'the kernel reports no cgroup for the socket (cgroup v2 is needed)' };
  // A cgroup outside the one this process sees: it runs in a container of its own (give it the host's cgroup namespace).
  if (cgroup.startsWith('unreachable:')) return { unknown: "the caller's cgroup is outside this process's cgroup namespace" };
  // ss prints the uid only when it is not root's.
  const uid = Number(/\buid:(\d+)/.exec(line)?.[1] ?? 0);
  return { uid, container: containerOfCgroup(cgroup) };
}

const endpoint = (address: string, port: number): string => (address.includes(':') ? `[${address}]:${port}` : `${address}:${port}`);

function lookUp(socket: Socket): Promise<PeerIdentity> {
  const { remoteAddress, remotePort, localAddress, localPort } = socket;
  if (!remoteAddress || !remotePort || !localAddress || !localPort) return Promise.resolve({ unknown: 'the connection has closed' });
  // The caller's end of the connection: its source is our peer, its destination our listener.
  const filter = ['src', endpoint(remoteAddress, remotePort), 'dst', endpoint(localAddress, localPort)];
  return new Promise((resolve) => {
    execFile('ss', ['-tnHe', '--cgroup', 'state', 'established', ...filter], { timeout: 5000 }, (error, stdout) => {
      if (error) return resolve({ unknown: `ss (iproute2) failed: ${error.message}` });
      const line = stdout.split('\n').find((text) => text.trim() !== '');
      resolve(line === undefined ? { unknown: 'the caller’s socket is gone' } : peerOfSsLine(line));
    });
  });
}

const IDENTITY = Symbol('loopbackPeer');
type IdentifiedSocket = Socket & { [IDENTITY]?: PeerIdentity | Promise<PeerIdentity> };

/** The identity of a connection's caller if it was looked up already (for messages; never starts a lookup). */
export function knownPeerOf(socket: Socket): PeerIdentity | undefined {
  const known = (socket as IdentifiedSocket)[IDENTITY];
  return known instanceof Promise ? undefined : known;
}

/** The process behind a loopback connection: the answer once known, else the lookup under way. */
export function loopbackPeerOf(socket: Socket): PeerIdentity | Promise<PeerIdentity> {
  const identified = socket as IdentifiedSocket;
  const known = identified[IDENTITY];
  if (known !== undefined) return known;
  const pending = lookUp(socket).then((identity) => (identified[IDENTITY] = identity));
  identified[IDENTITY] = pending;
  return pending;
}
