import { readFile, readdir, readlink } from 'node:fs/promises';

// Whether a unit's own container listens on its port. A probe only says that something answers
// there: on host networking a port another process holds (a platform role, a leftover server)
// answers the probe while the unit crash-loops on `bind: Address already in use`, and the unit
// would be reported running at the other process's address. The kernel says who listens: the
// LISTEN sockets on the port in the container's network namespace (/proc/<pid>/net/tcp{,6}, the
// host's tables on host networking) and the socket inodes the container's processes hold open
// (/proc/<p>/fd). Reading another process's fd table takes root (or CAP_SYS_PTRACE), as the agent
// runs; an agent that cannot see the container's processes says so (`unseen`) and its caller decides.

/**
 * `own`: a process of the container listens on the port; `other`: none does; `unseen`: /proc does
 * not show the container; `gone`: /proc has no such process (it exited, or this agent's PID
 * namespace is not the container's: the caller asks Docker which).
 */
export type Listener = 'own' | 'other' | 'unseen' | 'gone';

const LISTEN = '0A';

/** The inodes of the LISTEN sockets on `port` in /proc/net/tcp or tcp6 text (`sl local rem st … uid timeout inode`). */
export function listeningInodes(table: string, port: number): Set<string> {
  const inodes = new Set<string>();
  for (const line of table.split('\n').slice(1)) {
    const fields = line.trim().split(/\s+/);
    const localPort = fields[1]?.split(':').at(-1);
    if (fields[3] === LISTEN && localPort !== undefined && parseInt(localPort, 16) === port && fields[9] && fields[9] !== '0') inodes.add(fields[9]);
  }
  return inodes;
}

/** Whether `pid` is a zombie or dead (/proc/<pid>/stat's state, after the command's closing parenthesis). */
async function hasExited(pid: number): Promise<boolean> {
  const stat = await readOr(`/proc/${pid}/stat`, '');
  const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  return state === 'Z' || state === 'X' || stat === '';
}

const readOr = (path: string, fallback: string): Promise<string> => readFile(path, 'utf8').catch(() => fallback);

/** The socket inodes process `pid` holds open; undefined when its fd table cannot be read. */
async function socketInodes(pid: number): Promise<string[] | undefined> {
  let fds: string[];
  try {
    fds = await readdir(`/proc/${pid}/fd`);
  } catch (error) {
    // Gone since it was listed, or exiting (a dying process's fd table reads as refused, even to
    // root): it holds nothing. Refused to an agent that is not root: we cannot tell.
    return (error as NodeJS.ErrnoException).code === 'ENOENT' || process.getuid?.() === 0 ? [] : undefined;
  }
  const targets = await Promise.all(fds.map((fd) => readlink(`/proc/${pid}/fd/${fd}`).catch(() => '')));
  return targets.flatMap((target) => /^socket:\[(\d+)\]$/.exec(target)?.[1] ?? []);
}

/** `pid` and its descendants (the kernel's children lists), breadth first. */
async function descendants(pid: number): Promise<number[]> {
  const found = [pid];
  for (let i = 0; i < found.length && found.length < 10_000; i++) {
    const tasks = await readdir(`/proc/${found[i]}/task`).catch(() => [] as string[]);
    for (const task of tasks) {
      const children = await readOr(`/proc/${found[i]}/task/${task}/children`, '');
      for (const child of children.split(/\s+/).filter(Boolean)) found.push(Number(child));
    }
  }
  return found;
}

/** Every process in the PID namespace `namespace` (a `docker exec`'d one is no descendant of the container's first process). */
async function processesIn(namespace: string): Promise<number[]> {
  const all = (await readdir('/proc')).filter((entry) => /^\d+$/.test(entry));
  const inNamespace = await Promise.all(all.map(async (entry) => ((await readlink(`/proc/${entry}/ns/pid`).catch(() => '')) === namespace ? Number(entry) : undefined)));
  return inNamespace.filter((pid): pid is number => pid !== undefined);
}

async function holdsAny(pids: readonly number[], inodes: ReadonlySet<string>): Promise<boolean | undefined> {
  for (const pid of pids) {
    const held = await socketInodes(pid);
    if (held === undefined) return undefined;
    if (held.some((inode) => inodes.has(inode))) return true;
  }
  return false;
}

/**
 * Who listens on `port` for the container `containerId` whose first process is `pid` (Docker's
 * State.Pid, in this agent's PID namespace when both run on the host). `unseen` when /proc here
 * does not show that process as the container's (the agent runs in a PID namespace of its own) or
 * its fd tables cannot be read (the agent is not root).
 */
export async function listenerOf(pid: number, containerId: string, port: number): Promise<Listener> {
  let cgroup: string;
  try {
    cgroup = await readFile(`/proc/${pid}/cgroup`, 'utf8');
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ENOENT' ? 'gone' : 'unseen';
  }
  // A process that has exited but is not reaped yet (a zombie: the container's first process in the
  // moment before its shim reaps it, while Docker still reports the container running) reads as the
  // root cgroup, not the container's: it holds no socket, whatever answers on the port.
  if (!cgroup.includes(containerId)) return (await hasExited(pid)) ? 'other' : 'unseen';
  const tables = (await Promise.all([readOr(`/proc/${pid}/net/tcp`, ''), readOr(`/proc/${pid}/net/tcp6`, '')])).join('\n');
  const inodes = listeningInodes(tables, port);
  if (inodes.size === 0) return 'other';
  // Usually the first process or one it started listens; a full walk of the namespace only when neither does.
  const nearby = await holdsAny(await descendants(pid), inodes);
  if (nearby === undefined) return 'unseen';
  if (nearby) return 'own';
  const namespace = await readlink(`/proc/${pid}/ns/pid`).catch(() => '');
  // Unreadable because the process exited while its sockets were looked at (a unit failing to bind
  // a port another process holds dies within milliseconds): it listens nowhere. Only a live
  // process's namespace unreadable means this agent cannot see (not root).
  if (!namespace) return (await hasExited(pid)) ? 'other' : 'unseen';
  const anywhere = await holdsAny(await processesIn(namespace), inodes);
  return anywhere === undefined ? 'unseen' : anywhere ? 'own' : 'other';
}
