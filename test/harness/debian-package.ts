// The Debian package (scripts/package-deb.sh) for tests that install it, built from this clone's
// dist/ and cached in /var/cache/platform-test/packages by what makes it (the built program, the
// dependencies' lock, the script, deploy/debian/ and the version): a build takes 1 to 5 minutes,
// and a second test run of unchanged code reuses the first one's package.

import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, utimesSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ensureCommand } from './system-packages.js';

const PROJECT_ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const CACHE_DIR = '/var/cache/platform-test/packages';
/** A cached package unused this long is removed when another is built (each is ~30 MB). */
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
  ensureCommand('strip', 'binutils');
  const dir = join(CACHE_DIR, packageKey(version));
  const path = join(dir, `platform_${version}_amd64.deb`);
  if (existsSync(path)) {
    const now = new Date();
    utimesSync(dir, now, now); // used: kept by the next prune
    return { path, version, builtSeconds: undefined };
  }
  mkdirSync(CACHE_DIR, { recursive: true });
  const building = mkdtempSync(join(CACHE_DIR, 'building-'));
  const started = Date.now();
  try {
    await new Promise<void>((resolve, reject) => {
      const env = { ...process.env };
      delete env.NODE_OPTIONS;
      execFile('bash', [join(PROJECT_ROOT, 'scripts/package-deb.sh'), '--no-build', '--out', building, '--version', version], { env, timeout: 900_000, maxBuffer: 16 * 1024 * 1024 }, (error, _stdout, stderr) =>
        error ? reject(new Error(`scripts/package-deb.sh failed: ${error.message}\n${stderr.slice(-3000)}`)) : resolve(),
      );
    });
    // Complete, so it may be used (two runs building at once: the second rename finds it there).
    try {
      renameSync(building, dir);
    } catch {
      if (!existsSync(path)) throw new Error(`the package built in ${building} could not be cached at ${dir}`);
    }
  } finally {
    rmSync(building, { recursive: true, force: true });
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
  const work = mkdtempSync(join(CACHE_DIR, 'building-'));
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
    await new Promise<void>((resolve, reject) => {
      const env = { ...process.env };
      delete env.NODE_OPTIONS;
      execFile('bash', ['-c', script, 'restamp', base.path, version, work], { env, timeout: 300_000 }, (error, _stdout, stderr) =>
        error ? reject(new Error(`restamping ${base.path} as ${version} failed: ${error.message}\n${stderr.slice(-3000)}`)) : resolve(),
      );
    });
    renameSync(join(work, 'package.deb'), path);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  return { path, version, builtSeconds: (Date.now() - started) / 1000 };
}
