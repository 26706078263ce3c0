// Docker's error messages name places on the machine: its data root (…/overlay2/<id>/merged,
// …/volumes/<name>/_data), containerd's and runc's state, /proc. A unit's status goes to the API
// and the dashboard, whose readers need the reason, not the machine's layout, so those paths are
// replaced there (L7); the agent's own log keeps the message whole. Paths inside the container
// (`rootfs at "/data"`, `exec: "/app/start"`) are the unit's own and stay.

/** Where engines keep their state by default; the engine's own data root is added by the agent (Docker's `info`). */
const ENGINE_DIRS: readonly string[] = ['/var/lib/docker', '/var/lib/containerd', '/run/containerd', '/run/docker', '/var/run/docker', '/run/runc', '/proc'];

export const HOST_PATH = '<host path>';

const escaped = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** `message` with every path under `hostDirs` (and the engines' default directories) replaced by HOST_PATH. */
export function withoutHostPaths(message: string, hostDirs: readonly string[]): string {
  const dirs = [...new Set([...hostDirs, ...ENGINE_DIRS])].filter((dir) => dir.startsWith('/') && dir.length > 1).map((dir) => dir.replace(/\/+$/, ''));
  // A directory, and the rest of its path up to a quote, a blank, a colon, a comma or a bracket.
  const pattern = new RegExp(`(?:${dirs.map(escaped).join('|')})(?=$|[/\\s"':,()\\[\\]])(?:/[^\\s"':,()\\[\\]]*)?`, 'g');
  return message.replace(pattern, HOST_PATH);
}
