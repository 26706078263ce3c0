// The Debian package (scripts/package-deb.sh) for tests that install it, built from this clone's
// dist/ and cached in /var/cache/platform-test/packages by what makes it (the built program, the
// dependencies' lock, the script, deploy/debian/ and the version): a build takes 1 to 5 minutes,
// and a second test run of unchanged code reuses the first one's package.

import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, utimesSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { exitOnSignals } from './exit-on-signal.js';
import { ensureCommand } from './system-packages.js';

const PROJECT_ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const CACHE_DIR = '/var/cache/platform-test/packages';
/** A cached package unused this long is removed when another is built (each is ~4 MB). */
const UNUSED_FOR_MS = 3 * 86_400_000;

export const packageVersion = (JSON.parse(readFileSync(join(PROJECT_ROOT, 'package.json'), 'utf8')) as { version: string }).version;

const filesUnder = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true })
    .flatMap((entry) => (entry.isDirectory() ? filesUnder(join(dir, entry.name)) : [join(dir, entry.name)]))
    .sort();

/** What the package is made of: a change of any of these builds another. */
function packageKey(version: string): string {
  const hash = createHash('sha256').update(version);
  const inputs = [...filesUnder(join(PROJECT_ROOT, 'dist/src')), ...filesUnder(join(PROJECT_ROOT, 'deploy/debian')), ...['package.json', 'package-lock.json', 'scripts/package-deb.sh'].map((file) => join(PROJECT_ROOT, file))];
  for (const file of inputs) hash.update(`\0${relative(PROJECT_ROOT, file)}\0`).update(readFileSync(file));
  return hash.digest('hex').slice(0, 16);
}

export interface DebianPackage {
  /** The .deb: `platform_<version>_amd64.deb`. */
  path: string;
  version: string;
  /** Seconds the build took, or undefined when the cache had it. */
  builtSeconds: number | undefined;
}

/** `scripts/package-deb.sh --no-build [--version V]` of the built dist/, from the cache when it has it. */
export async function debianPackage(version = packageVersion): Promise<DebianPackage> {
  ensureCommand('dpkg-deb', 'dpkg');
  const dir = join(CACHE_DIR, packageKey(version));
  const path = join(dir, `platform_${version}_amd64.deb`);
  if (existsSync(path)) {
    const now = new Date();
    utimesSync(dir, now, now); // used: kept by the next prune
    return { path, version, builtSeconds: undefined };
  }
  mkdirSync(CACHE_DIR, { recursive: true });
  const building = scratchDir();
  const started = Date.now();
  try {
    await runBuild('scripts/package-deb.sh', [join(PROJECT_ROOT, 'scripts/package-deb.sh'), '--no-build', '--out', building, '--version', version], building, 900_000);
    // Complete, so it may be used (two runs building at once: the second rename finds it there).
    try {
      renameSync(building, dir);
    } catch {
      if (!existsSync(path)) throw new Error(`the package built in ${building} could not be cached at ${dir}`);
    }
  } finally {
    removeScratch(building);
  }
  pruneUnused();
  return { path, version, builtSeconds: (Date.now() - started) / 1000 };
}

/** Removes the cached packages no run has used for UNUSED_FOR_MS (their code changed since). */
function pruneUnused(): void {
  for (const entry of readdirSync(CACHE_DIR)) {
    const dir = join(CACHE_DIR, entry);
    if (!entry.startsWith('building-') && Date.now() - statSync(dir).mtimeMs > UNUSED_FOR_MS) rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * `base`'s files as package version `version`, stamped where scripts/package-deb.sh stamps a
 * version (the control file, the packaged package.json, which `platform version` reads): a newer
 * package to upgrade to in seconds, where a second build takes minutes. Kept beside `base`.
 */
export async function restampedPackage(base: DebianPackage, version: string): Promise<DebianPackage> {
  const path = join(dirname(base.path), `platform_${version}_amd64.deb`);
  if (existsSync(path)) return { path, version, builtSeconds: undefined };
  const started = Date.now();
  const work = scratchDir();
  const script = [
    'set -eu',
    'dpkg-deb --raw-extract "$1" "$3/root"',
    'sed -i "s/^Version: .*/Version: $2/" "$3/root/DEBIAN/control"',
    'node -e \'const f = process.argv[1], p = JSON.parse(require("fs").readFileSync(f, "utf8")); p.version = process.argv[2]; require("fs").writeFileSync(f, JSON.stringify(p, null, 2) + "\\n");\' "$3/root/usr/lib/platform/package.json" "$2"',
    '(cd "$3/root" && find . -path ./DEBIAN -prune -o -type f -printf "%P\\0" | sort -z | xargs -0 md5sum) >"$3/root/DEBIAN/md5sums"',
    // Uncompressed: compressing 100 MB again is most of a build's time, and the test's machines read it from disk.
    'dpkg-deb --root-owner-group -Znone --build "$3/root" "$3/package.deb" >/dev/null',
  ].join('\n');
  try {
    await runBuild(`restamping ${base.path} as ${version}`, ['-c', script, 'restamp', base.path, version, work], work, 300_000);
    renameSync(join(work, 'package.deb'), path);
  } finally {
    removeScratch(work);
  }
  return { path, version, builtSeconds: (Date.now() - started) / 1000 };
}

/** The process groups of builds running now, and their unfinished output: killed and removed with the test process, however it ends. */
const runningBuilds = new Set<number>();
const scratchDirs = new Set<string>();
process.on('exit', () => {
  for (const group of runningBuilds) killGroup(group);
  for (const dir of scratchDirs) rmSync(dir, { recursive: true, force: true });
});

function scratchDir(): string {
  const dir = mkdtempSync(join(CACHE_DIR, 'building-'));
  scratchDirs.add(dir);
  return dir;
}

function removeScratch(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
  scratchDirs.delete(dir);
}

const killGroup = (group: number): void => {
  try {
    process.kill(-group, 'SIGKILL');
  } catch {
    // gone already
  }
};

/**
 * `bash <args>` in a process group of its own, killed whole (dpkg-deb, xz, npm below it) at
 * `timeoutMs` or when the test process exits: a test killed by tap's timeout or ^C left a package
 * build running for minutes on the shared cores, writing into the cache after the run. Its
 * temporary files go under `scratch` (TMPDIR), which is removed with it: a killed script's own
 * clean-up (trap … EXIT) never runs.
 */
async function runBuild(what: string, args: string[], scratch: string, timeoutMs: number): Promise<void> {
  exitOnSignals();
  const env: NodeJS.ProcessEnv = { ...process.env, TMPDIR: scratch };
  delete env.NODE_OPTIONS;
  const child = spawn('bash', args, { env, detached: true, stdio: ['ignore', 'ignore', 'pipe'] });
  const group = child.pid!;
  runningBuilds.add(group);
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr = (stderr + chunk).slice(-3000)));
  const timer = setTimeout(() => killGroup(group), timeoutMs);
  try {
    const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve, reject) => {
      child.once('error', reject);
      child.once('exit', (exitCode, exitSignal) => resolve([exitCode, exitSignal]));
    });
    if (code !== 0) throw new Error(`${what} failed (${signal ?? `exit code ${code}`}${signal === 'SIGKILL' ? `, killed after ${timeoutMs / 1000} s?` : ''}):\n${stderr}`);
  } finally {
    clearTimeout(timer);
    killGroup(group); // what the script left in the background
    runningBuilds.delete(group);
  }
}
