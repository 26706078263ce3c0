import { execFileSync, spawnSync } from 'node:child_process';

// Integration tests run real programs from Debian packages. On a fresh test machine (root in a
// container) we install what is missing; elsewhere we say exactly what to install.

const commandExists = (command: string): boolean =>
  spawnSync('sh', ['-c', `command -v "$0"`, command], { stdio: 'ignore' }).status === 0;

function aptGet(args: string[]): boolean {
  const result = spawnSync('apt-get', args, {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
  });
  return result.status === 0;
}

/** Makes sure `command` is on PATH, installing `debianPackage` with apt-get when running as root. */
export function ensureCommand(command: string, debianPackage: string): void {
  if (commandExists(command)) return;
  if (process.getuid?.() !== 0) {
    throw new Error(`${command} is missing: install the Debian package ${debianPackage} (apt-get install -y ${debianPackage})`);
  }
  if (!aptGet(['install', '-y', debianPackage])) {
    execFileSync('apt-get', ['update'], { stdio: 'ignore', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
    if (!aptGet(['install', '-y', debianPackage])) {
      throw new Error(`apt-get install -y ${debianPackage} failed; ${command} is still missing`);
    }
  }
  if (!commandExists(command)) throw new Error(`${debianPackage} is installed but ${command} is not on PATH`);
}
