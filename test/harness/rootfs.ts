import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type Docker from 'dockerode';
import { ensureCommand } from './system-packages.js';

// Images the tests make on this machine instead of pulling them (Docker Hub is out of reach): a
// root file system of Debian's static busybox, optionally with the Node runtime running the tests
// (the binary and the libraries it links) and its npm, imported with `docker import`.

export interface RootfsOptions {
  /** busybox applets linked into /bin (`sh`, `cat`, …). */
  applets: string[];
  /** This machine's Node binary, at the same path, with the shared libraries it loads. */
  node?: boolean;
  /** The npm that came with that Node, as /usr/bin/npm and /usr/bin/npx (implies `node`). */
  npm?: boolean;
  /**
   * This machine's CA bundle as /etc/ssl/certs/ca-certificates.crt: where egress passes through a
   * TLS-inspecting proxy, npm inside the image trusts what npm here trusts (with NODE_EXTRA_CA_CERTS).
   */
  caCertificates?: boolean;
}

const caBundle = '/etc/ssl/certs/ca-certificates.crt';

export interface ProgressEvent {
  status?: string;
  error?: string;
  errorDetail?: { message?: string };
  aux?: { Digest?: string };
}

/** The Node binary running the tests. */
export const nodeBinary = realpathSync(process.execPath);

/** Waits for a pull, push or import stream to end; rejects with the first error it reported. */
export function followProgress(docker: Docker, stream: NodeJS.ReadableStream): Promise<ProgressEvent[]> {
  return new Promise((resolve, reject) => {
    docker.modem.followProgress(stream, (error: Error | null, events: ProgressEvent[]) => {
      if (error) return reject(error);
      const failed = events.find((event) => event.error);
      if (failed) return reject(new Error(failed.errorDetail?.message ?? failed.error));
      resolve(events);
    });
  });
}

/** The shared libraries `binary` loads, as the paths the dynamic linker looks for (from ldd). */
function linkedLibraries(binary: string): string[] {
  const ldd = spawnSync('ldd', [binary], { encoding: 'utf8' });
  if (ldd.status !== 0) return []; // statically linked: "not a dynamic executable"
  return [...ldd.stdout.matchAll(/(?:=>\s*)?(\/\S+)\s+\(0x/g)].map((match) => match[1]!);
}

/** Copies `file` (following links) to the same path under `rootfs`. */
function copyInto(rootfs: string, file: string): void {
  const target = join(rootfs, file);
  mkdirSync(dirname(target), { recursive: true });
  copyFileSync(realpathSync(file), target);
  chmodSync(target, 0o755);
}

function addNpm(rootfs: string): void {
  // npm sits beside the Node that installed it: <prefix>/bin/node, <prefix>/lib/node_modules/npm.
  const npmDir = join(dirname(dirname(nodeBinary)), 'lib', 'node_modules', 'npm');
  if (!existsSync(join(npmDir, 'bin', 'npm-cli.js'))) throw new Error(`no npm beside ${nodeBinary} (looked in ${npmDir})`);
  cpSync(npmDir, join(rootfs, npmDir), { recursive: true });
  mkdirSync(join(rootfs, 'usr/bin'), { recursive: true });
  for (const command of ['npm', 'npx']) symlinkSync(join(npmDir, 'bin', `${command}-cli.js`), join(rootfs, 'usr/bin', command));
  // npm's scripts start with #!/usr/bin/env node.
  symlinkSync('/bin/busybox', join(rootfs, 'usr/bin/env'));
  mkdirSync(join(rootfs, 'root'), { recursive: true });
  mkdirSync(join(rootfs, 'etc'), { recursive: true });
  writeFileSync(join(rootfs, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/sh\n');
}

/** Copies the shared libraries `binary` loads into `rootfs`, at the same paths. */
export function copyLinkedLibraries(rootfs: string, binary: string): void {
  for (const library of linkedLibraries(binary)) copyInto(rootfs, library);
}

/** Makes the root file system in the directory `rootfs`. */
export function buildRootfs(rootfs: string, options: RootfsOptions): void {
  ensureCommand('busybox', 'busybox-static');
  mkdirSync(join(rootfs, 'bin'), { recursive: true });
  mkdirSync(join(rootfs, 'tmp'));
  chmodSync(join(rootfs, 'tmp'), 0o1777);
  // A volume mounted at /data starts with this directory's mode: units on host networking run as
  // nobody by default, and can write their volume as an image made for a non-root user lets them.
  mkdirSync(join(rootfs, 'data'));
  chmodSync(join(rootfs, 'data'), 0o1777);
  const busybox = execFileSync('sh', ['-c', 'command -v busybox'], { encoding: 'utf8' }).trim();
  copyFileSync(busybox, join(rootfs, 'bin', 'busybox'));
  chmodSync(join(rootfs, 'bin', 'busybox'), 0o755);
  for (const applet of options.applets) symlinkSync('busybox', join(rootfs, 'bin', applet));
  if (options.node || options.npm) {
    copyInto(rootfs, nodeBinary);
    copyLinkedLibraries(rootfs, nodeBinary);
  }
  if (options.npm) addNpm(rootfs);
  if (options.caCertificates) {
    mkdirSync(join(rootfs, dirname(caBundle)), { recursive: true });
    copyFileSync(caBundle, join(rootfs, caBundle));
  }
}

function buildRootfsTar(options: RootfsOptions): { tarPath: string; cleanup: () => void } {
  ensureCommand('tar', 'tar');
  const dir = mkdtempSync(join(tmpdir(), 'platform-image-'));
  const rootfs = join(dir, 'rootfs');
  buildRootfs(rootfs, options);
  const tarPath = join(dir, 'rootfs.tar');
  execFileSync('tar', ['-C', rootfs, '-cf', tarPath, '.']);
  return { tarPath, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** `docker import` of a root file system as `repo:tag`, with Dockerfile `changes` (CMD, ENV, …). */
export async function importRootfs(docker: Docker, options: RootfsOptions, image: { repo: string; tag: string; changes: string[] }): Promise<void> {
  const { tarPath, cleanup } = buildRootfsTar(options);
  try {
    await followProgress(docker, await docker.importImage(tarPath, image));
  } finally {
    cleanup();
  }
}
