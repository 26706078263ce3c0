import type Docker from 'dockerode';
import { followProgress, importRootfs, nodeBinary } from './rootfs.js';

// Test images are built locally from Debian's busybox-static (rootfs.ts) and pushed to the local
// registry: nothing is pulled from the internet. The image is a tiny HTTP server whose page names
// the unit, its GREETING and its release, so a test can tell which unit and release answered.
//
// busybox httpd closes the connection after every response. The `keep-alive` variant serves the
// same page with Node's http server (this Node binary and the libraries it links, copied into the
// image), which keeps connections open as nearly every real service does: the gateway's upstream
// pools and its benchmark need that case too.

export interface TestImageOptions {
  /**
   * `ok` serves HTTP on $PORT (busybox httpd); `keep-alive` the same with Node (and GET /connections); `crash` exits 1 at once,
   * `slow-crash` after 4 s; `failing` prints 120 numbered lines (`failing line N`), `<unit> halfway` on stderr after the 60th, then exits 3;
   * `chatty` serves too, and once /tmp/chatter exists (a test creates it with exec) writes $LOG_BYTES bytes of output in
   * numbered lines of 100 bytes (`chatter 000000001 000…`), then `chatter done` and a `tick N` line every 200 ms;
   * `memory-hog` grows a shell string without end (until the kernel kills it); `volume` serves its page with the release
   * and GREETING that first wrote /data/first (a unit's volume): a later release, or a restart, shows the data survived;
   * `locking` is a single writer: it exits 1 while /data/lock exists (another unit holds the volume), else takes the lock,
   * serves as `ok` does, and drops the lock when it stops; `locking-never-ready` takes the lock the same way but never serves;
   * `missing-command` names a command the image does not have (`nope`): the engine refuses to start it.
   */
  variant?: 'ok' | 'keep-alive' | 'crash' | 'slow-crash' | 'failing' | 'chatty' | 'memory-hog' | 'volume' | 'locking' | 'locking-never-ready' | 'missing-command';
  /** Baked into the image (ENV IMAGE_LABEL) and appended to the page, so tags differ in digest. */
  label?: string;
  /** The registry's login, for a registry that requires one. */
  auth?: { username: string; password: string };
}

export interface TestImage {
  /** `registryHost/repository:tag`. */
  reference: string;
  /** The manifest digest the registry reported for the push: `sha256:…`. */
  digest: string;
}

const appletLinks = ['sh', 'httpd', 'echo', 'mkdir', 'cat', 'sleep', 'kill', 'env', 'awk', 'touch', 'rm'];

// The trap makes SIGTERM end the unit at once, as a well-behaved service does, instead of waiting
// out the stop grace period (PID 1 ignores signals it installs no handler for).
const serveScript =
  'mkdir -p /tmp/www && ' +
  'echo "$PLATFORM_UNIT $GREETING $PLATFORM_RELEASE${IMAGE_LABEL:+ $IMAGE_LABEL}" > /tmp/www/index.html && ' +
  'echo "serving $PLATFORM_UNIT on port $PORT" && ' +
  'trap "kill \\$pid; exit 0" TERM; ' +
  'httpd -f -p $PORT -h /tmp/www & pid=$!; wait';
// Waits for its signal file so a test can start following the output first.
const chattyScript =
  'mkdir -p /tmp/www && echo "$PLATFORM_UNIT" > /tmp/www/index.html && ' +
  'trap "exit 0" TERM; httpd -f -p $PORT -h /tmp/www & ' +
  'echo "waiting for /tmp/chatter"; while [ ! -e /tmp/chatter ]; do sleep 0.1; done; ' +
  // Numbered lines of 100 bytes, so a reader can tell which it missed.
  'awk -v n="$LOG_BYTES" \'BEGIN { for (i = 1; i <= n / 100; i++) printf "chatter %09d %081d\\n", i, 0 }\'; ' +
  'echo "chatter done"; i=0; while true; do i=$((i+1)); echo "tick $i"; sleep 0.2; done';
const crashScript = 'echo "$PLATFORM_UNIT crashing" >&2; exit 1';
// Runs a while before it fails: a crash loop that lasts long enough for a test to act while it goes on.
const slowCrashScript = 'echo "$PLATFORM_UNIT crashing in 4 s" >&2; sleep 4; exit 1';
// 120 numbered lines with one on stderr halfway (the kept output is the last 100), then exit 3. The
// pauses around the stderr line order it: the engine copies the two streams apart.
const failingScript =
  'i=1; while [ $i -le 120 ]; do echo "failing line $i"; ' +
  'if [ $i -eq 60 ]; then sleep 0.2; echo "$PLATFORM_UNIT halfway" >&2; sleep 0.2; fi; i=$((i+1)); done; exit 3';
// Doubling a string makes the shell allocate without any allocator applet: 2^26 bytes is 64 MB.
// It waits a second first: containerd on cgroup v1 watches a container's OOM events only from a
// moment after its start, and a process killed before then is reported as a plain exit 137 with
// OOMKilled false (containerd issues 8180 and 8893; seen once in five runs on Debian 13's 1.7.24).
const memoryHogScript = 'sleep 1; echo "$PLATFORM_UNIT allocating"; s=x; while :; do s="$s$s"; done';
const volumeScript =
  'mkdir -p /tmp/www && ' +
  '{ cat /data/first 2>/dev/null || echo "$PLATFORM_RELEASE/$GREETING" > /data/first; } && ' +
  'echo "$PLATFORM_UNIT $PLATFORM_RELEASE first $(cat /data/first)" > /tmp/www/index.html && ' +
  'trap "kill \\$pid; exit 0" TERM; ' +
  'httpd -f -p $PORT -h /tmp/www & pid=$!; wait';
// A single writer, as SQLite or DuckDB holding their file lock: a second unit on the volume refuses to start.
const takeLock = 'if [ -e /data/lock ]; then echo "$PLATFORM_UNIT: /data/lock exists, another unit writes this volume" >&2; exit 1; fi; touch /data/lock && ';
const lockingScript =
  takeLock +
  'mkdir -p /tmp/www && ' +
  'echo "$PLATFORM_UNIT $GREETING $PLATFORM_RELEASE${IMAGE_LABEL:+ $IMAGE_LABEL}" > /tmp/www/index.html && ' +
  'echo "serving $PLATFORM_UNIT on port $PORT with /data/lock" && ' +
  'trap "kill \\$pid; rm -f /data/lock; exit 0" TERM; ' +
  'httpd -f -p $PORT -h /tmp/www & pid=$!; wait';
const lockingNeverReadyScript = takeLock + 'echo "$PLATFORM_UNIT holds /data/lock and never serves"; trap "rm -f /data/lock; exit 0" TERM; while true; do sleep 0.2; done';
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

const shellScripts = { ok: serveScript, crash: crashScript, 'slow-crash': slowCrashScript, failing: failingScript, chatty: chattyScript, 'memory-hog': memoryHogScript, volume: volumeScript, locking: lockingScript, 'locking-never-ready': lockingNeverReadyScript } as const;

/** Builds the test image, pushes it to `registryHost` and returns its reference and digest. */
export async function buildTestImage(
  docker: Docker,
  registryHost: string,
  repository: string,
  tag: string,
  options: TestImageOptions = {},
): Promise<TestImage> {
  const command =
    options.variant === 'keep-alive' ? [nodeBinary, '-e', keepAliveScript] : options.variant === 'missing-command' ? ['nope'] : ['/bin/sh', '-c', shellScripts[options.variant ?? 'ok']];
  const changes = [`CMD ${JSON.stringify(command)}`, 'ENV PATH=/bin'];
  if (options.label) changes.push(`ENV IMAGE_LABEL=${options.label}`);
  const repo = `${registryHost}/${repository}`;
  await importRootfs(docker, { applets: appletLinks, node: options.variant === 'keep-alive' }, { repo, tag, changes });
  const pushed = await followProgress(docker, await docker.getImage(`${repo}:${tag}`).push({ tag, authconfig: options.auth ? { ...options.auth, serveraddress: registryHost } : {} } as object));
  const digest = pushed.map((event) => event.aux?.Digest).find((value) => value);
  if (!digest) throw new Error(`pushing ${repo}:${tag} reported no digest`);
  return { reference: `${repo}:${tag}`, digest };
}
