// What packages a platform process loads (issues 29 and 31: a client command loads no server
// package, an idle role none it does not need). Run the process with `--import packageHook`: a
// resolve hook writes `package <name>` on stderr for each package the process imports, the first
// time. It writes with writeSync: on Node 24 hooks run on their own thread, whose process.stderr is
// a pipe to the main thread, and `--help` exits before it is flushed (the hook then seemed to see nothing).

export const packageHook = `data:text/javascript,${encodeURIComponent(`
import { register } from 'node:module';
register('data:text/javascript,' + encodeURIComponent(\`
import { writeSync } from 'node:fs';
const seen = new Set();
export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context);
  const match = /node_modules\\\\/((@[^/]+\\\\/)?[^/]+)/.exec(resolved.url);
  if (match && !seen.has(match[1])) { seen.add(match[1]); writeSync(2, 'package ' + match[1] + '\\\\n'); }
  return resolved;
}\`));
`)}`;

/** The packages the hook reported in a process's stderr. */
export const loadedPackages = (stderr: string): string[] => [...stderr.matchAll(/^package (\S+)$/gm)].map((match) => match[1]!);
