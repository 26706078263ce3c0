import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
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
  /** The id of the container the caller runs in (12 hex digits, as `docker ps` shows it); undefined: none, or unseen. */
  container: string | undefined;
  /**
   * Why the caller's cgroup could not be read, when it could not: this process runs in a container
   * of its own (the image, compose.yaml) without `ss` or without the host's cgroup namespace. Only
   * the uid is known then, and only a caller running as this process's own user is taken for local.
   */
  cgroupUnseen?: string;
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
  // ss prints the uid only when it is not root's.
  const uid = Number(/\buid:(\d+)/.exec(line)?.[1] ?? 0);
  // Without the socket's cgroup (an old kernel, or cgroup v1 only) a container cannot be told from the host.
  if (cgroup === undefined) return { uid, container: undefined, cgroupUnseen: 'the kernel reports no cgroup for the socket (cgroup v2 is needed)' };
  // A cgroup outside the one this process sees: it runs in a container of its own (give it the host's cgroup namespace).
  if (cgroup.startsWith('unreachable:')) return { uid, container: undefined, cgroupUnseen: "the caller's cgroup is outside this process's cgroup namespace" };
  return { uid, container: containerOfCgroup(cgroup) };
}

/** `[::ffff:127.0.0.1]:80`, `127.0.0.1:80` and `::ffff:127.0.0.1` with port 80 as one spelling: an IPv6 listener sees IPv4 callers mapped. */
const endpoint = (address: string, port: number | string): string => `${address.replace(/^\[|\]$/g, '').replace(/^::ffff:(?=\d)/i, '')}:${port}`;

/** The caller's end and ours in one line of `ss` (the state column is left out when one state is asked for). */
function endsOfSsLine(line: string): { caller: string; listener: string } | undefined {
  const match = /(\S+):(\d+)\s+(\S+):(\d+)/.exec(line);
  return match ? { caller: endpoint(match[1]!, match[2]!), listener: endpoint(match[3]!, match[4]!) } : undefined;
}

interface Waiting {
  caller: string;
  listener: string;
  /** Whether our end of the connection is still open: while it is, so is the caller's, on the same host. */
  open: () => boolean;
  /** `ss` listings this lookup has been through without its socket in them. */
  misses: number;
  resolve: (identity: PeerIdentity) => void;
}

/**
 * How many listings may miss a socket whose connection is still open before the caller counts as
 * unknown. The kernel's socket dump is not atomic: sockets opened and closed beside it (units
 * starting by the hundred, their health checks) can make a dump skip one that was there all along
 * (seen at 1,000 units: a deploy from the operator's own shell refused as not local, 401).
 */
const LISTINGS = 3;

/** The connections to a listening port (the callers' ends, as `ss` prints them), or why they could not be listed. */
export type ListSockets = (port: number) => Promise<string[] | string>;

const listWithSs: ListSockets = (port) => {
  const args = ['-tnHe', '--cgroup', 'state', 'established', 'dport', '=', `:${port}`];
  return new Promise((resolve) => {
    execFile('ss', args, { timeout: 5000, maxBuffer: 64 * 1024 * 1024 }, (error, stdout) => {
      resolve(error ? `ss (iproute2) failed: ${error.message}` : stdout.split('\n').filter((text) => text.trim() !== ''));
    });
  });
};

/**
 * One `ss` at a time per listening port answers every lookup waiting for it: a caller opening
 * connections by the thousand (a unit, say) makes at most two processes run, not thousands.
 */
export class PortLookups {
  private waiting: Waiting[] = [];
  private running = false;

  constructor(
    private readonly port: number,
    private readonly list: ListSockets = listWithSs,
  ) {}

  lookUp(caller: string, listener: string, open: () => boolean = () => true): Promise<PeerIdentity> {
    return new Promise((resolve) => {
      this.waiting.push({ caller, listener, open, misses: 0, resolve });
      if (!this.running) void this.run();
    });
  }

  private async run(): Promise<void> {
    this.running = true;
    while (this.waiting.length > 0) {
      const batch = this.waiting;
      this.waiting = [];
      const lines = await this.list(this.port);
      for (const waiting of batch) {
        const { caller, listener, open, resolve } = waiting;
        if (typeof lines === 'string') {
          resolve(await ownerInProcNet(caller, listener, lines));
          continue;
        }
        const line = lines.find((text) => {
          const ends = endsOfSsLine(text);
          return ends?.caller === caller && ends.listener === listener;
        });
        if (line !== undefined) resolve(peerOfSsLine(line));
        else if (!open()) resolve({ unknown: 'the caller’s socket is gone' });
        else if (++waiting.misses < LISTINGS) this.waiting.push(waiting);
        else resolve({ unknown: `the caller’s socket was in none of ${LISTINGS} listings of the kernel’s sockets` });
      }
    }
    this.running = false;
  }
}

/** `0100007F:1F90` (IPv4) or 32 hex digits of four little-endian words (IPv6) and a port, as /proc/net/tcp writes an end. */
export function endOfProcNet(hex: string): string | undefined {
  const [address, port] = hex.split(':');
  if (address === undefined || port === undefined) return undefined;
  const words = address.match(/.{8}/g) ?? [];
  const bytes = words.flatMap((word) => (word.match(/../g) ?? []).reverse().map((byte) => parseInt(byte, 16)));
  let ip: string;
  if (bytes.length === 4) ip = bytes.join('.');
  else if (bytes.length === 16 && bytes.slice(0, 10).every((byte) => byte === 0) && bytes[10] === 255 && bytes[11] === 255) ip = bytes.slice(12).join('.');
  else if (bytes.length === 16) ip = bytes.every((byte, index) => byte === (index === 15 ? 1 : 0)) ? '::1' : `ipv6 ${address}`;
  else return undefined;
  return endpoint(ip, parseInt(port, 16));
}

/** The uid of the socket whose ends are `caller` and `listener`, in one line of /proc/net/tcp or tcp6. */
export function uidOfProcNetLine(line: string, caller: string, listener: string): number | undefined {
  const fields = line.trim().split(/\s+/);
  if (fields.length < 8 || endOfProcNet(fields[1]!) !== caller || endOfProcNet(fields[2]!) !== listener) return undefined;
  return Number(fields[7]);
}

/**
 * Where `ss` cannot run (the container image has no iproute2), the kernel's socket table of this
 * network namespace still names the owner's uid, though not its cgroup.
 */
async function ownerInProcNet(caller: string, listener: string, ssFailure: string): Promise<PeerIdentity> {
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    const text = await readFile(table, 'utf8').catch(() => '');
    for (const line of text.split('\n').slice(1)) {
      const uid = uidOfProcNetLine(line, caller, listener);
      if (uid !== undefined) return { uid, container: undefined, cgroupUnseen: ssFailure };
    }
  }
  return { unknown: `${ssFailure}, and the caller's socket is not in /proc/net/tcp` };
}

const lookupsByPort = new Map<number, PortLookups>();

function lookUp(socket: Socket): Promise<PeerIdentity> {
  const { remoteAddress, remotePort, localAddress, localPort } = socket;
  if (!remoteAddress || !remotePort || !localAddress || !localPort) return Promise.resolve({ unknown: 'the connection has closed' });
  let lookups = lookupsByPort.get(localPort);
  if (!lookups) lookupsByPort.set(localPort, (lookups = new PortLookups(localPort)));
  // The caller's end of the connection: its source is our peer, its destination our listener.
  return lookups.lookUp(endpoint(remoteAddress, remotePort), endpoint(localAddress, localPort), () => !socket.destroyed && socket.readyState === 'open');
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
