import t from 'tap';
import { execFile, execFileSync, spawn } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { debianPackage, packageVersion } from '../harness/debian-package.js';
import { ensureCommand } from '../harness/system-packages.js';
import { buildRootfs, copyLinkedLibraries, nodeBinary } from '../harness/rootfs.js';
import { freePort } from '../harness/free-port.js';
import { waitFor } from '../harness/wait.js';

// `npm run package` (scripts/package-deb.sh) builds the Debian package from the built dist/: its
// files are where docs/debian-package.md says, lintian finds no error, and the program runs from
// the package alone — in a chroot holding only the package's files, busybox, and a Node 20 at
// /usr/bin/node with the C libraries it links (standing in for Debian's nodejs, which the package
// depends on), so nothing of this checkout (its node_modules, its dist/) can stand in for a part
// the package lacks. The machine install test (machine-install.test) runs it on Debian 13's own
// nodejs.

ensureCommand('dpkg-deb', 'dpkg');
ensureCommand('lintian', 'lintian');
ensureCommand('chroot', 'coreutils');
const chroot = execFileSync('sh', ['-c', 'command -v chroot'], { encoding: 'utf8' }).trim();
/**
 * `args` run in the chroot `root`, with an environment of PATH alone: tap adds its loaders (files of
 * this checkout) to every child's NODE_OPTIONS, and `env -i` drops them.
 */
const inChroot = (root: string, args: string[]): [string, string[]] => ['env', ['-i', 'PATH=/usr/bin:/bin', chroot, root, ...args]];

const version = packageVersion;

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

const run = (command: string, args: string[], timeout = 600_000): Promise<Run> =>
  new Promise((resolve) => {
    execFile(command, args, { timeout, maxBuffer: 64 * 1024 * 1024 }, (error, stdout, stderr) => {
      resolve({ code: error ? Number((error as { code?: unknown }).code ?? 1) : 0, stdout, stderr });
    });
  });

const dir = mkdtempSync(join(tmpdir(), 'platform-deb-test-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

// Built once per content (test/harness/debian-package.ts): the machine install test (docs/install.md) installs the same file.
const built = await debianPackage(version);
const deb = built.path;

const mainUnits = ['agent.service', 'gateway.service', 'orchestrator.service', 'scheduler.service', 'service-directory.service', 'web.service'];
const sidekicks = ['orchestrator-announce.service', 'scheduler-announce.service', 'service-directory-announce.service', 'web-announce.service'];

t.test('npm run package builds platform_<version>_amd64.deb', async (t) => {
  t.equal(basename(deb), `platform_${version}_amd64.deb`);
  const origin = built.builtSeconds === undefined ? 'from the cache of an earlier run' : `built in ${Math.round(built.builtSeconds)} s`;
  t.comment(`package: ${(statSync(deb).size / 1024 / 1024).toFixed(1)} MB, ${origin}`);
});

t.test('the control file: name, version, architecture, what it depends on, its conffile and scripts', async (t) => {
  const info = await run('dpkg-deb', ['--info', deb]);
  t.equal(info.code, 0, info.stderr);
  t.match(info.stdout, /^ Package: platform$/m);
  t.match(info.stdout, new RegExp(`^ Version: ${version.replace(/\./g, '\\.')}$`, 'm'));
  t.match(info.stdout, /^ Architecture: amd64$/m);
  const depends = /^ Depends: (.*)$/m.exec(info.stdout)?.[1] ?? '';
  t.match(depends, /\badduser\b/, 'postinst makes the user with adduser');
  t.match(depends, /(^|, )nodejs \(>= 20\)(,|$)/, "Debian's own nodejs, 20 or later (Debian 13's is 20.19)");
  t.match(info.stdout, /^ Recommends: docker\.io \| docker-ce, haproxy/m);
  for (const script of ['postinst', 'prerm', 'postrm', 'conffiles', 'md5sums']) t.match(info.stdout, new RegExp(`^ +\\d+ bytes, +\\d+ lines +\\*? *${script}\\b`, 'm'), script);
  const conffiles = await run('dpkg-deb', ['--info', deb, 'conffiles']);
  t.equal(conffiles.stdout, '/etc/platform/platform.env\n');
});

t.test('the files: the program and its dependencies, the command, the units, the settings', async (t) => {
  const listing = await run('dpkg-deb', ['--contents', deb]);
  t.equal(listing.code, 0, listing.stderr);
  const entries = new Map(
    listing.stdout
      .trim()
      .split('\n')
      .map((line) => line.split(/\s+/))
      .map((fields) => [fields[5]!.replace(/^\.\//, '/'), { mode: fields[0]!, owner: fields[1]! }]),
  );
  for (const path of [
    '/usr/bin/platform',
    '/usr/lib/platform/package.json',
    '/usr/lib/platform/dist/src/cli.js',
    '/usr/lib/platform/dist/src/web/index.html',
    '/usr/lib/platform/node_modules/fastify/package.json',
    '/usr/lib/platform/node_modules/etcd3/package.json',
    '/usr/share/doc/platform/copyright',
    '/usr/share/doc/platform/changelog.gz',
    '/usr/share/man/man1/platform.1.gz',
  ]) {
    t.ok(entries.has(path), path);
  }
  for (const unit of [...mainUnits, ...sidekicks]) t.equal(entries.get(`/lib/systemd/system/${unit}`)?.mode, '-rw-r--r--', unit);
  t.same(
    [...entries.keys()].filter((path) => path.startsWith('/lib/systemd/system/') && path.endsWith('.service')).length,
    mainUnits.length + sidekicks.length,
    'no other unit',
  );
  t.same(entries.get('/etc/platform/platform.env'), { mode: '-rw-------', owner: 'root/root' }, 'root-only: it holds secrets once configured');
  t.equal(entries.get('/usr/bin/platform')?.mode, '-rwxr-xr-x');
  t.same([...entries.keys()].filter((path) => path.startsWith('/usr/lib/platform/node/')), [], 'no Node runtime of its own: it depends on Debian\'s nodejs');
  t.same([...new Set([...entries.values()].map((entry) => entry.owner))], ['root/root']);
  const paths = [...entries.keys()];
  t.same(paths.filter((path) => /^\/usr\/lib\/platform\/node_modules\/(typescript|tap|eslint|playwright-core|autocannon|@redocly)\//.test(path)).slice(0, 3), [], 'no development dependency');
  t.same(paths.filter((path) => /^\/usr\/lib\/platform\/dist\/(test|bench)\/|\.map$/.test(path)).slice(0, 3), [], 'no tests, benchmarks or source maps');
  t.same(paths.filter((path) => !/^\/(usr\/(bin|lib\/platform|share\/(doc|man|lintian)\/)|lib\/systemd\/system\/|etc\/platform\/)/.test(path) && !path.endsWith('/')).slice(0, 3), [], 'nothing elsewhere');
});

t.test('the units run /usr/bin/platform; the maintainer scripts name exactly the packaged units', async (t) => {
  const extracted = join(dir, 'extracted');
  const control = join(dir, 'control');
  t.equal((await run('dpkg-deb', ['--extract', deb, extracted])).code, 0);
  t.equal((await run('dpkg-deb', ['--control', deb, control])).code, 0);
  for (const unit of [...mainUnits, ...sidekicks]) {
    const content = readFileSync(join(extracted, 'lib/systemd/system', unit), 'utf8');
    t.match(content, /^ExecStart=\/usr\/bin\/platform (serve|announce) /m, unit);
  }
  const postinst = readFileSync(join(control, 'postinst'), 'utf8');
  const upgradeOrder = /^UPGRADE_ORDER="([^"]*)"$/m.exec(postinst)?.[1]?.split(' ') ?? [];
  t.same([...upgradeOrder].sort(), mainUnits, 'an upgrade restarts each role unit (its sidekick follows it), and nothing else');
  for (const script of ['prerm', 'postrm']) {
    const units = /^UNITS="([^"]*)"$/m.exec(readFileSync(join(control, script), 'utf8'))?.[1]?.split(' ') ?? [];
    t.same([...units].sort(), [...mainUnits, ...sidekicks].sort(), `${script} stops or forgets every packaged unit`);
  }
  t.notMatch(postinst + readFileSync(join(control, 'prerm'), 'utf8'), /docker\.service|restart docker/, 'Docker is never restarted');
});

t.test('lintian reports no error', async (t) => {
  const checked = await run('lintian', ['--tag-display-limit', '0', deb]);
  const errors = checked.stdout.split('\n').filter((line) => line.startsWith('E: '));
  t.same(errors, [], 'no E: line');
  t.equal(checked.code, 0, checked.stderr);
  const warnings = checked.stdout.split('\n').filter((line) => line.startsWith('W: '));
  if (warnings.length > 0) t.comment(`lintian warnings (docs/debian-package.md says why each stays):\n${warnings.join('\n')}`);
});

t.test('the lintian check finds an error in a broken package (so its pass means something)', async (t) => {
  const root = join(dir, 'broken');
  mkdirSync(join(root, 'DEBIAN'), { recursive: true });
  mkdirSync(join(root, 'usr/bin'), { recursive: true });
  writeFileSync(join(root, 'DEBIAN/control'), 'Package: broken\nVersion: 1\nArchitecture: all\nMaintainer: x <x@example.org>\nDescription: broken\n broken.\n');
  writeFileSync(join(root, 'usr/bin/broken'), '#!/usr/bin/bash\necho broken\n', { mode: 0o755 });
  const brokenDeb = join(dir, 'broken.deb');
  t.equal((await run('dpkg-deb', ['--root-owner-group', '--build', root, brokenDeb])).code, 0);
  const checked = await run('lintian', [brokenDeb]);
  t.not(checked.code, 0);
  t.match(checked.stdout, /^E: broken: wrong-path-for-interpreter/m);
});

t.test('the program runs from the package and a Node 20 alone: every module and dependency, a role serving', async (t) => {
  // A root holding the package's files, busybox's sh (the command is a shell script), and this
  // host's Node 20 as /usr/bin/node with the C libraries it links, as Debian's nodejs puts it: no
  // node_modules but the package's.
  const root = join(dir, 'chroot');
  buildRootfs(root, { applets: ['sh'] });
  t.equal((await run('dpkg-deb', ['--extract', deb, root])).code, 0);
  copyFileSync(nodeBinary, join(root, 'usr/bin/node'));
  copyLinkedLibraries(root, join(root, 'usr/bin/node'));
  const inRoot = (args: string[]) => run(...inChroot(root, args), 60_000);

  const node = await inRoot(['/usr/bin/node', '--version']);
  t.equal(node.code, 0, node.stderr);
  t.ok(Number(/^v(\d+)\./.exec(node.stdout)?.[1]) >= 20, `Node 20 or later: ${node.stdout.trim()}`);

  const help = await inRoot(['/usr/bin/platform', '--help']);
  t.equal(help.code, 0, help.stderr);
  t.match(help.stdout, /Usage: platform/);
  const client = await inRoot(['/usr/bin/platform', 'version', '--client']);
  t.equal(client.code, 0, client.stderr);
  t.match(client.stdout, new RegExp(`^platform ${version.replace(/\./g, '\\.')}\\b`));

  // Every module of the program loads (all of its imports, so every dependency it names, resolve).
  const loaded = await inRoot([
    '/usr/bin/node',
    '--input-type=module',
    '-e',
    `import { readdirSync } from 'node:fs';
     const base = '/usr/lib/platform/dist/src/';
     const modules = readdirSync(base, { recursive: true }).filter((path) => path.endsWith('.js') && path !== 'cli.js' && !path.startsWith('web/'));
     for (const path of modules) await import(base + path);
     console.log(modules.length);`,
  ]);
  t.equal(loaded.code, 0, loaded.stderr);
  t.ok(Number(loaded.stdout) > 100, `${loaded.stdout.trim()} modules loaded`);

  // Units rendered by the packaged command run it.
  const rendered = await inRoot(['/usr/bin/platform', 'systemd', 'render', '--out', '/tmp/units']);
  t.equal(rendered.code, 0, rendered.stderr);
  t.match(readFileSync(join(root, 'tmp/units/scheduler.service'), 'utf8'), /^ExecStart=\/usr\/bin\/platform serve --role scheduler /m);

  // A role serves: the service directory on the embedded store, its API and OpenAPI document.
  const port = await freePort();
  const directory = spawn(...inChroot(root, ['/usr/bin/platform', 'serve', '--role', 'directory', '--host', '127.0.0.1', '--port', String(port), '--data-dir', '/tmp/store', '--auth', 'none']), { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  directory.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  directory.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<void>((resolve) => directory.once('exit', () => resolve()));
  t.teardown(async () => {
    directory.kill('SIGKILL');
    await exited;
  });
  const ready = await waitFor(() => fetch(`http://127.0.0.1:${port}/readyz`).then((response) => response.ok), 30_000, { what: `the packaged directory's /readyz (${output.slice(-500)})` }).catch((error: Error) => error);
  t.equal(ready, true, String(ready));
  const services = await fetch(`http://127.0.0.1:${port}/services`);
  t.equal(services.status, 200);
  t.same(await services.json(), []);
  const openapi = await fetch(`http://127.0.0.1:${port}/documentation/json`);
  t.equal(openapi.status, 200, 'the OpenAPI document (@fastify/swagger)');
  directory.kill('SIGINT');
  await exited;
});

t.test("an upgrade's postinst restarts the platform's active units one at a time, each active again before the next", async (t) => {
  // No systemd runs as PID 1 here (the machines of issue 30 run the package under a real one): the
  // packaged postinst runs in a chroot whose systemctl and deb-systemd-invoke are scripts that log
  // each call and keep each unit's state in a file, /state/<unit>.
  const root = join(dir, 'postinst');
  buildRootfs(root, { applets: ['sh', 'cat'] });
  t.equal((await run('dpkg-deb', ['--control', deb, join(root, 'control')])).code, 0);
  mkdirSync(join(root, 'run/systemd/system'), { recursive: true });
  mkdirSync(join(root, 'dev'));
  execFileSync('mknod', ['-m', '666', join(root, 'dev/null'), 'c', '1', '3']);
  mkdirSync(join(root, 'state'));
  const fake = (name: string, body: string) => writeFileSync(join(root, 'usr/bin', name), `#!/bin/sh\necho "${name} $*" >>/calls\n${body}\n`, { mode: 0o755 });
  mkdirSync(join(root, 'usr/bin'), { recursive: true });
  fake('systemctl', [
    'case "$1" in',
    'is-active) state="$(cat "/state/$2" 2>/dev/null || echo inactive)"; echo "$state"; [ "$state" = active ] ;;',
    'show) cat "/state/$4.restarts" 2>/dev/null || echo 0 ;;',
    'esac',
  ].join('\n'));
  // A unit marked broken fails when restarted.
  fake('deb-systemd-invoke', 'if [ "$1" = restart ] && [ -e "/state/$2.broken" ]; then echo failed >"/state/$2"; fi');
  fake('getent', 'exit 0'); // the platform user and group exist
  fake('sleep', 'exit 0');
  const postinst = (args: string[]) => {
    writeFileSync(join(root, 'calls'), '');
    return run(...inChroot(root, ['/control/postinst', ...args]), 60_000);
  };
  const calls = () => readFileSync(join(root, 'calls'), 'utf8').trim().split('\n');
  for (const unit of ['scheduler.service', 'agent.service', 'gateway.service']) writeFileSync(join(root, 'state', unit), 'active\n');

  const fresh = await postinst(['configure', '']);
  t.equal(fresh.code, 0, fresh.stderr);
  t.same(calls().filter((call) => !call.startsWith('getent')), ['systemctl --system daemon-reload'], 'a first install starts nothing');

  const upgrade = await postinst(['configure', '0.1.0']);
  t.equal(upgrade.code, 0, upgrade.stderr);
  const actions = calls().filter((call) => !/^(getent|systemctl show|sleep)/.test(call));
  t.same(
    actions,
    [
      'systemctl --system daemon-reload',
      'systemctl is-active scheduler.service',
      'deb-systemd-invoke restart scheduler.service',
      'systemctl is-active scheduler.service',
      'systemctl is-active scheduler.service',
      'systemctl is-active service-directory.service',
      'systemctl is-active orchestrator.service',
      'systemctl is-active web.service',
      'systemctl is-active agent.service',
      'deb-systemd-invoke restart agent.service',
      'systemctl is-active agent.service',
      'systemctl is-active agent.service',
      'systemctl is-active gateway.service',
      'deb-systemd-invoke restart gateway.service',
      'systemctl is-active gateway.service',
      'systemctl is-active gateway.service',
    ],
    'the control plane, the agent, the gateway: each restarted once it is its turn, and seen active (twice, 3 s apart) before the next; inactive units left alone',
  );
  t.match(upgrade.stdout, /restarting scheduler\.service on the new version/);

  writeFileSync(join(root, 'state', 'agent.service.broken'), '');
  const broken = await postinst(['configure', '0.1.0']);
  t.equal(broken.code, 1, 'a unit that does not come back fails the postinst');
  t.match(broken.stderr, /agent\.service is not active again after 60s .*the units after it .* still run the old version/);
  t.notOk(calls().includes('deb-systemd-invoke restart gateway.service'), 'and stops the sequence there');
});
