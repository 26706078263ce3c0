import t from 'tap';
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureCommand } from '../harness/system-packages.js';
import { platformBin } from '../harness/platform.js';

// The units `platform systemd render` writes pass `systemd-analyze verify` (Debian's systemd), as
// they would on a machine where the platform is installed as docs/install.md says: ExecStart names
// an executable that exists (here the repository's bin/platform, through --bin). `systemd-analyze
// security --offline` checks the sandboxing kept its level. The units running under a real systemd:
// systemd-units-on-machines.test.ts (docs/test-machines.md).

ensureCommand('systemd-analyze', 'systemd');

interface Run {
  code: number;
  output: string;
}

const run = (command: string, args: string[]): Promise<Run> =>
  new Promise((resolve) => {
    execFile(command, args, { timeout: 60_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? Number((error as { code?: unknown }).code ?? 1) : 0, output: `${stdout}${stderr}`.trim() });
    });
  });

const dir = mkdtempSync(join(tmpdir(), 'platform-units-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

const rendered = await run(process.execPath, [platformBin, 'systemd', 'render', '--out', dir, '--bin', platformBin, '--etcd', 'https://10.0.0.1:2379,https://10.0.0.2:2379,https://10.0.0.3:2379', '--advertise', '10.0.0.2', '--etcd-ca', '/etc/platform/etcd-ca.pem', '--etcd-cert', '/etc/platform/etcd-client.pem', '--etcd-key', '/etc/platform/etcd-client-key.pem']);
const units = readdirSync(dir).filter((name) => name.endsWith('.service')).map((name) => join(dir, name));

t.test('platform systemd render writes every unit', async (t) => {
  t.equal(rendered.code, 0, 'exit 0');
  t.equal(units.length, 10);
  t.match(rendered.output, /wrote \S+platform\.env$/m);
});

t.test('systemd-analyze verify accepts every unit and says nothing', async (t) => {
  const verified = await run('systemd-analyze', ['verify', ...units]);
  t.equal(verified.code, 0, verified.output);
  t.equal(verified.output, '', 'no warning either');
});

t.test('the check finds a broken unit (so a pass means something)', async (t) => {
  const broken = join(dir, 'broken.service');
  writeFileSync(broken, '[Unit]\nDescription=broken\nBindsTo=nothing-here.service\n\n[Service]\nExecStart=/nonexistent/platform serve\nRestart=sometimes\n');
  t.teardown(() => rmSync(broken));
  const verified = await run('systemd-analyze', ['verify', broken]);
  t.not(verified.code, 0);
  t.match(verified.output, /nonexistent\/platform/);
  t.match(verified.output, /restart specifier/);
});

t.test('systemd-analyze security rates every unit at 2.0 or better ("OK")', async (t) => {
  const rated = await run('systemd-analyze', ['security', '--offline=yes', '--threshold=20', ...units]);
  t.equal(rated.code, 0, rated.output.split('\n').filter((line) => line.includes('Overall')).join('\n'));
  const levels = [...rated.output.matchAll(/Overall exposure level for (\S+): ([\d.]+)/g)].map((match) => `${match[1]} ${match[2]}`);
  t.equal(levels.length, units.length, levels.join(', '));
});
