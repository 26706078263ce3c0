import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type Docker from 'dockerode';
import { ensureCommand } from './system-packages.js';

// Test images are built locally from Debian's busybox-static and pushed to the local registry:
// nothing is pulled from the internet. The image is a tiny HTTP server whose page names the unit,
// its GREETING and its release, so a test can tell which unit and release answered.
//
// busybox httpd closes the connection after every response. The `keep-alive` variant serves the
// same page with Node's http server (this Node binary and the libraries it links, copied into the
// image), which keeps connections open as nearly every real service does: the gateway's upstream
// pools and its benchmark need that case too.

export interface TestImageOptions {
  /** `ok` serves HTTP on $PORT (busybox httpd); `keep-alive` the same with Node (and GET /connections); `crash` exits 1 at once. */
  variant?: 'ok' | 'keep-alive' | 'crash';
  /** Baked into the image (ENV IMAGE_LABEL) and appended to the page, so tags differ in digest. */
  label?: string;
}

export interface TestImage {
  /** `registryHost/repository:tag`. */
  reference: string;
  /** The manifest digest the registry reported for the push: `sha256:…`. */
  digest: string;
}

/** The Node binary running the tests: the keep-alive variant's server runs on it. */
const nodeBinary = realpathSync(process.execPath);

const appletLinks = ['sh', 'httpd', 'echo', 'mkdir', 'cat', 'sleep', 'kill', 'env'];

// The trap makes SIGTERM end the unit at once, as a well-behaved service does, instead of waiting
// out the stop grace period (PID 1 ignores signals it installs no handler for).
const serveScript =
  'mkdir -p /tmp/www && ' +
  'echo "$PLATFORM_UNIT $GREETING $PLATFORM_RELEASE${IMAGE_LABEL:+ $IMAGE_LABEL}" > /tmp/www/index.html && ' +
  'echo "serving $PLATFORM_UNIT on port $PORT" && ' +
  'trap "kill \\$pid; exit 0" TERM; ' +
  'httpd -f -p $PORT -h /tmp/www & pid=$!; wait';
const crashScript = 'echo "$PLATFORM_UNIT crashing" >&2; exit 1';
const keepAliveScript = [
  "const { PLATFORM_UNIT: unit, GREETING: greeting = '', PLATFORM_RELEASE: release, IMAGE_LABEL: label, PORT: port } = process.env;",
  "const page = `${unit} ${greeting} ${release}${label ? ` ${label}` : ''}\\n`;",
  // GET /connections: how many TCP connections the server has accepted, so a test can tell reuse.
  'let connections = 0;',
  "const server = require('node:http').createServer((req, res) => { res.setHeader('content-type', 'text/html'); res.end(req.url === '/connections' ? `${connections}\\n` : page); });",
  "server.on('connection', () => { connections += 1; });",
  'server.listen(Number(port));',
  "console.log(`serving ${unit} on port ${port} (keep-alive)`);",
  "process.on('SIGTERM', () => process.exit(0));",
].join('\n');

/** The shared libraries `binary` loads, as the paths the dynamic linker looks for (from ldd). */
function linkedLibraries(binary: string): string[] {
  const ldd = spawnSync('ldd', [binary], { encoding: 'utf8' });
  if (ldd.status !== 0) return []; // statically linked: "not a dynamic executable"
  const listing = ldd.stdout;
  return [...listing.matchAll(/(?:=>\s*)?(\/\S+)\s+\(0x/g)].map((match) => match[1]!);
}

/** Copies `file` (following links) to the same path under `rootfs`. */
function copyInto(rootfs: string, file: string): void {
  const target = join(rootfs, file);
  mkdirSync(dirname(target), { recursive: true });
  copyFileSync(realpathSync(file), target);
  chmodSync(target, 0o755);
}

function buildRootfsTar(withNode: boolean): { tarPath: string; cleanup: () => void } {
  ensureCommand('busybox', 'busybox-static');
  ensureCommand('tar', 'tar');
  const dir = mkdtempSync(join(tmpdir(), 'platform-image-'));
  const rootfs = join(dir, 'rootfs');
  mkdirSync(join(rootfs, 'bin'), { recursive: true });
  mkdirSync(join(rootfs, 'tmp'));
  chmodSync(join(rootfs, 'tmp'), 0o1777);
  const busybox = execFileSync('sh', ['-c', 'command -v busybox'], { encoding: 'utf8' }).trim();
  copyFileSync(busybox, join(rootfs, 'bin', 'busybox'));
  chmodSync(join(rootfs, 'bin', 'busybox'), 0o755);
  for (const applet of appletLinks) symlinkSync('busybox', join(rootfs, 'bin', applet));
  if (withNode) {
    copyInto(rootfs, nodeBinary);
    for (const library of linkedLibraries(nodeBinary)) copyInto(rootfs, library);
  }
  const tarPath = join(dir, 'rootfs.tar');
  execFileSync('tar', ['-C', rootfs, '-cf', tarPath, '.']);
  return { tarPath, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

interface ProgressEvent {
  status?: string;
  error?: string;
  errorDetail?: { message?: string };
  aux?: { Digest?: string };
}

function followProgress(docker: Docker, stream: NodeJS.ReadableStream): Promise<ProgressEvent[]> {
  return new Promise((resolve, reject) => {
    docker.modem.followProgress(stream, (error: Error | null, events: ProgressEvent[]) => {
      if (error) return reject(error);
      const failed = events.find((event) => event.error);
      if (failed) return reject(new Error(failed.errorDetail?.message ?? failed.error));
      resolve(events);
    });
  });
}

/** Builds the test image, pushes it to `registryHost` and returns its reference and digest. */
export async function buildTestImage(
  docker: Docker,
  registryHost: string,
  repository: string,
  tag: string,
  options: TestImageOptions = {},
): Promise<TestImage> {
  const command =
    options.variant === 'keep-alive' ? [nodeBinary, '-e', keepAliveScript] : ['/bin/sh', '-c', options.variant === 'crash' ? crashScript : serveScript];
  const changes = [`CMD ${JSON.stringify(command)}`, 'ENV PATH=/bin'];
  if (options.label) changes.push(`ENV IMAGE_LABEL=${options.label}`);
  const repo = `${registryHost}/${repository}`;
  const { tarPath, cleanup } = buildRootfsTar(options.variant === 'keep-alive');
  try {
    await followProgress(docker, await docker.importImage(tarPath, { repo, tag, changes }));
  } finally {
    cleanup();
  }
  const pushed = await followProgress(docker, await docker.getImage(`${repo}:${tag}`).push({ tag, authconfig: {} } as object));
  const digest = pushed.map((event) => event.aux?.Digest).find((value) => value);
  if (!digest) throw new Error(`pushing ${repo}:${tag} reported no digest`);
  return { reference: `${repo}:${tag}`, digest };
}
