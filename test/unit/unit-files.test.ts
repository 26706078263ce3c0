import t from 'tap';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { defaultSettings, renderUnitFiles } from '../../src/systemd/unit-files.js';
import { keepsEnvironmentFile, machineSettings } from '../../src/systemd/units-command.js';
import { announceOptions } from '../../src/announce.js';
import { ConfigError, resolveConfig } from '../../src/config.js';

// The systemd units `platform systemd render` writes, and the settings that drive them.

const deployDir = fileURLToPath(new URL('../../../deploy/systemd/', import.meta.url));

t.test('deploy/systemd/ holds exactly what the defaults render', async (t) => {
  const rendered = renderUnitFiles(defaultSettings);
  t.same(readdirSync(deployDir).sort(), [...rendered.keys()].sort(), 'the same files');
  for (const [name, content] of rendered) {
    t.equal(readFileSync(`${deployDir}${name}`, 'utf8'), content, `${name} is current (run: platform systemd render --out deploy/systemd --force)`);
  }
  t.same(
    [...rendered.keys()].filter((name) => name.endsWith('.service')).sort(),
    [
      'agent.service',
      'gateway.service',
      'orchestrator-announce.service',
      'orchestrator.service',
      'scheduler-announce.service',
      'scheduler.service',
      'service-directory-announce.service',
      'service-directory.service',
      'web-announce.service',
      'web.service',
    ],
    'the specification\'s names',
  );
});

t.test('a role with a sidekick runs with --no-announce; the sidekick is bound to it and probes its address', async (t) => {
  const files = renderUnitFiles({ ...defaultSettings, roles: ['scheduler', 'agent', 'gateway'] });
  t.same([...files.keys()].sort(), ['agent.service', 'gateway.service', 'platform.env', 'scheduler-announce.service', 'scheduler.service']);
  const scheduler = files.get('scheduler.service')!;
  t.match(scheduler, /^ExecStart=\/usr\/local\/bin\/platform serve --role scheduler --port 9002 --data-dir \/var\/lib\/platform-scheduler --no-announce \$PLATFORM_SCHEDULER_FLAGS$/m);
  t.match(scheduler, /^Wants=.*scheduler-announce\.service/m);
  t.match(scheduler, /^Restart=always$/m);
  t.match(scheduler, /^EnvironmentFile=\/etc\/platform\/platform\.env$/m);
  const sidekick = files.get('scheduler-announce.service')!;
  t.match(sidekick, /^BindsTo=scheduler\.service$/m);
  t.match(sidekick, /^After=scheduler\.service$/m);
  t.match(sidekick, /^ExecStart=\/usr\/local\/bin\/platform announce --role scheduler --address \$\{PLATFORM_ADVERTISE\}:9002$/m);
  // Issue 30, defect 5: `systemctl enable scheduler` (the README's) enables the sidekick too, so it shows as enabled.
  t.match(scheduler, /^\[Install\]\nWantedBy=multi-user\.target\nAlso=scheduler-announce\.service$/m);
  t.match(sidekick, /^\[Install\]\nWantedBy=scheduler\.service$/m);
  t.notMatch(files.get('agent.service')!, /^Also=/m, 'no sidekick, nothing else to enable');
});

t.test('roles may read the machine\'s interfaces over netlink (listening on every address needs them); sidekicks may not', async (t) => {
  // Issue 30, defects 1 and 2: without AF_NETLINK, os.networkInterfaces() fails and a role on 0.0.0.0 exits at start.
  for (const [name, content] of renderUnitFiles(defaultSettings)) {
    if (!name.endsWith('.service')) continue;
    const families = name.endsWith('-announce.service') ? 'AF_UNIX AF_INET AF_INET6' : 'AF_UNIX AF_INET AF_INET6 AF_NETLINK';
    t.match(content, new RegExp(`^RestrictAddressFamilies=${families}$`, 'm'), name);
  }
});

t.test('the agent may use the Docker socket and the gateway port 80; nothing else gets either', async (t) => {
  const files = renderUnitFiles(defaultSettings);
  const agent = files.get('agent.service')!;
  const gateway = files.get('gateway.service')!;
  t.match(agent, /^SupplementaryGroups=docker$/m);
  t.match(agent, /^After=.*docker\.service/m);
  t.notMatch(agent, /--no-announce/, 'agents register their machine themselves');
  t.match(gateway, /^AmbientCapabilities=CAP_NET_BIND_SERVICE$/m);
  t.match(gateway, /--port 80 --host 0\.0\.0\.0 --https-port 443 --data-dir \/var\/lib\/platform-gateway \$PLATFORM_GATEWAY_FLAGS$/m);
  t.match(gateway, /^StateDirectory=platform-gateway$/m, "HAProxy's files have a writable directory under ProtectSystem=strict");
  t.notMatch(gateway, /--no-announce/, 'the gateway has no sidekick');
  const scheduler = files.get('scheduler.service')!;
  t.match(scheduler, /^StateDirectory=platform-scheduler\nStateDirectoryMode=0700$/m, 'backups have a directory of their own under ProtectSystem=strict');
  t.match(scheduler, /--data-dir \/var\/lib\/platform-scheduler /, 'the pre-migration backup goes under it by default');
  t.notMatch(files.get('scheduler-announce.service')!, /StateDirectory/, 'its sidekick writes nothing');
  t.match(files.get('platform.env')!, /^#PLATFORM_BACKUP_DIR=\/var\/lib\/platform-scheduler\/backups$/m);
  for (const [name, content] of files) {
    if (!name.endsWith('.service')) continue;
    for (const setting of ['NoNewPrivileges=yes', 'ProtectSystem=strict', 'ProtectHome=yes', 'PrivateTmp=yes', 'SystemCallFilter=@system-service', 'User=platform']) {
      t.match(content, new RegExp(`^${setting}$`, 'm'), `${name}: ${setting}`);
    }
    if (name !== 'agent.service') t.notMatch(content, /docker/i, `${name}: no Docker`);
    if (name !== 'gateway.service') t.match(content, /^CapabilityBoundingSet=$/m, `${name}: no capabilities`);
  }
});

t.test("HAProxy outlives a restart of the gateway unit, not a stop: systemd signals the gateway alone, SIGTERM to restart, SIGINT to stop", async (t) => {
  const files = renderUnitFiles(defaultSettings);
  const gateway = files.get('gateway.service')!;
  t.match(gateway, /^KillMode=process$/m, "a restart leaves HAProxy in the unit's control group");
  t.match(gateway, /^KillSignal=SIGINT$/m, 'a stop is a stop for good: the gateway stops HAProxy');
  t.match(gateway, /^RestartKillSignal=SIGTERM$/m, 'a restart leaves HAProxy for the next gateway to adopt');
  for (const [name, content] of files) if (name !== 'gateway.service') t.notMatch(content, /KillMode|KillSignal/, `${name}: systemd's defaults`);
});

t.test('the environment file carries the machine\'s settings', async (t) => {
  const settings = machineSettings({
    roles: 'agent,directory',
    etcd: 'https://10.0.0.1:2379,https://10.0.0.2:2379',
    advertise: '10.0.0.2',
    etcdCa: '/etc/platform/ca.pem',
    etcdCert: '/etc/platform/c.pem',
    etcdKey: '/etc/platform/k.pem',
  });
  const env = renderUnitFiles(settings).get('platform.env')!;
  t.match(env, /^PLATFORM_ETCD=https:\/\/10\.0\.0\.1:2379,https:\/\/10\.0\.0\.2:2379$/m);
  t.match(env, /^PLATFORM_ADVERTISE=10\.0\.0\.2$/m);
  t.match(env, /^PLATFORM_HOST=10\.0\.0\.2$/m, '--listen defaults to --advertise');
  t.match(env, /^PLATFORM_UNIT_HOST=10\.0\.0\.2$/m);
  t.match(env, /^PLATFORM_ETCD_CA=\/etc\/platform\/ca\.pem$/m);
  t.match(env, /^#PLATFORM_ETCD_USER=/m, 'unset settings stay commented out');
  t.match(env, /^PLATFORM_AUTH=token$/m);
  t.notMatch(env, /PLATFORM_ALLOWED_REGISTRIES/, 'scheduler settings only where a scheduler runs');
  t.notMatch(env, /PLATFORM_ENGINE_GRACE/, 'nor the engine grace');
  t.match(env, /^#PLATFORM_LOG_MAX_SIZE=10m$/m, 'the agent\'s unit log rotation, at its default');
  t.notMatch(env, /PLATFORM_GATEWAY_DATA_PLANE|PLATFORM_ACME_EMAIL/, 'gateway settings only where a gateway runs');
  const all = renderUnitFiles(machineSettings({ roles: 'scheduler,gateway' })).get('platform.env')!;
  t.match(all, /^#PLATFORM_ENGINE_GRACE=30$/m);
  t.match(all, /^#PLATFORM_GATEWAY_DATA_PLANE=auto$/m);
  t.match(all, /^#PLATFORM_ACME_EMAIL=/m);
});

t.test("units run the executable --bin names, else PLATFORM_BIN (the Debian package's /usr/bin/platform sets it), else /usr/local/bin/platform", async (t) => {
  const execStarts = (settings: ReturnType<typeof machineSettings>) =>
    [...renderUnitFiles(settings).values()].flatMap((content) => content.match(/^ExecStart=\S+/gm) ?? []);
  t.same(new Set(execStarts(machineSettings({}, { PLATFORM_BIN: '/usr/bin/platform' }))), new Set(['ExecStart=/usr/bin/platform']));
  t.equal(machineSettings({ bin: '/opt/platform/bin/platform' }, { PLATFORM_BIN: '/usr/bin/platform' }).bin, '/opt/platform/bin/platform', 'the flag wins');
  t.equal(machineSettings({}, {}).bin, '/usr/local/bin/platform');
  t.equal(machineSettings({}, { PLATFORM_BIN: '' }).bin, '/usr/local/bin/platform', 'an empty value counts as unset');
  t.throws(() => machineSettings({}, { PLATFORM_BIN: 'platform' }), new ConfigError('PLATFORM_BIN takes an absolute path without spaces, got platform'));
});

t.test('bad render settings are refused naming the flag', async (t) => {
  t.throws(() => machineSettings({ advertise: '10.0.0.2:9000' }), new ConfigError('--advertise takes a host name or address without a port (each role adds its own), got 10.0.0.2:9000'));
  t.throws(() => machineSettings({ etcd: 'http://10.0.0.1:2379', etcdCa: '/ca.pem' }), /--etcd-ca and --etcd-cert need https:\/\/ etcd URLs/);
  t.throws(() => machineSettings({ bin: 'platform' }), /--bin takes an absolute path/);
  t.throws(() => machineSettings({ etcd: '10.0.0.1:2379' }), /--etcd takes URLs such as/);
  t.throws(() => machineSettings({ roles: 'directory,nope' }), /^--roles: unknown role nope/);
  t.throws(() => machineSettings({ etcdCert: '/c.pem', etcd: 'https://e:2379' }), /--etcd-cert and --etcd-key go together/);
});

t.test('--no-announce and PLATFORM_ANNOUNCE switch a role\'s own announcement off', async (t) => {
  t.equal(resolveConfig({ role: 'directory' }, {}).announce, true);
  t.equal(resolveConfig({ role: 'directory', announce: false }, {}).announce, false);
  t.equal(resolveConfig({ role: 'directory' }, { PLATFORM_ANNOUNCE: 'false' }).announce, false);
  t.equal(resolveConfig({ role: 'directory', announce: true }, { PLATFORM_ANNOUNCE: 'no' }).announce, false, 'the variable turns it off too');
  t.throws(() => resolveConfig({ role: 'directory' }, { PLATFORM_ANNOUNCE: 'maybe' }), new ConfigError('PLATFORM_ANNOUNCE must be true or false, got maybe'));
});

t.test('the units\' variables reach the config: listen, advertise, unit host, TTL', async (t) => {
  const config = resolveConfig({ role: 'agent' }, { PLATFORM_HOST: '10.0.0.2', PLATFORM_ADVERTISE: '10.0.0.2', PLATFORM_UNIT_HOST: '10.0.0.2', PLATFORM_ANNOUNCE_TTL: '7' });
  t.equal(config.host, '10.0.0.2');
  t.equal(config.advertiseHost, '10.0.0.2');
  t.equal(config.agent.unitHost, '10.0.0.2');
  t.equal(config.announceTtlSeconds, 7);
  const flagsWin = resolveConfig({ role: 'agent', host: '0.0.0.0', advertise: 'a.example:1', unitHost: 'b' }, { PLATFORM_HOST: '10.0.0.2', PLATFORM_ADVERTISE: '10.0.0.2', PLATFORM_UNIT_HOST: 'c' });
  t.same([flagsWin.host, flagsWin.advertiseHost, flagsWin.advertisePort, flagsWin.agent.unitHost], ['0.0.0.0', 'a.example', 1, 'b'], 'a flag beats the variable');
});

t.test('the scheduler\'s engine grace comes from --engine-grace or PLATFORM_ENGINE_GRACE', async (t) => {
  t.equal(resolveConfig({ role: 'scheduler' }, {}).scheduler.engineGraceSeconds, 30);
  t.equal(resolveConfig({ role: 'scheduler' }, { PLATFORM_ENGINE_GRACE: '45' }).scheduler.engineGraceSeconds, 45);
  t.equal(resolveConfig({ role: 'scheduler', engineGrace: '5' }, { PLATFORM_ENGINE_GRACE: '45' }).scheduler.engineGraceSeconds, 5, 'a flag beats the variable');
  t.throws(() => resolveConfig({ role: 'scheduler' }, { PLATFORM_ENGINE_GRACE: '0' }), /--engine-grace/);
});

t.test('the scheduler\'s machine grace comes from --machine-grace or PLATFORM_MACHINE_GRACE, as a duration', async (t) => {
  t.equal(resolveConfig({ role: 'scheduler' }, {}).scheduler.machineGraceMs, 300_000, 'five minutes by default');
  t.equal(resolveConfig({ role: 'scheduler' }, { PLATFORM_MACHINE_GRACE: '10m' }).scheduler.machineGraceMs, 600_000);
  t.equal(resolveConfig({ role: 'scheduler', machineGrace: '90s' }, { PLATFORM_MACHINE_GRACE: '10m' }).scheduler.machineGraceMs, 90_000, 'a flag beats the variable');
  t.throws(() => resolveConfig({ role: 'scheduler' }, { PLATFORM_MACHINE_GRACE: '300' }), /--machine-grace: a duration is a number and a unit/);
  t.throws(() => resolveConfig({ role: 'scheduler', machineGrace: '2d' }, {}), /--machine-grace: at most 1d, got 2d/);
});

t.test('a sidekick probes at most every third of its TTL, so a silent component is withdrawn within it', async (t) => {
  const base = { role: 'web', address: '10.0.0.2:9004' };
  t.equal(announceOptions(base, {}).checkIntervalMs, 2000);
  t.equal(announceOptions({ ...base, announceTtl: '3' }, {}).checkIntervalMs, 750, 'a short TTL shortens the default interval');
  t.equal(announceOptions(base, { PLATFORM_ANNOUNCE_TTL: '30' }).ttlSeconds, 30);
  t.throws(() => announceOptions({ ...base, checkInterval: '4' }, {}), /--check-interval must be from 0\.1 s to a third of --announce-ttl \(10 s\)/);
  t.throws(() => announceOptions({ ...base, address: '10.0.0.2' }, {}), /--address must be host:port/);
  t.throws(() => announceOptions({ ...base, role: 'directory' }, {}), /--role must be one of service-directory/);
});

t.test('render keeps an existing platform.env, but replaces the Debian package\'s untouched one (its defaults)', async (t) => {
  const packaged = renderUnitFiles(defaultSettings).get('platform.env')!;
  t.notOk(keepsEnvironmentFile(undefined), 'none yet: written');
  t.notOk(keepsEnvironmentFile(packaged), 'the package\'s, as installed: replaced by this machine\'s settings');
  t.ok(keepsEnvironmentFile(packaged.replace('PLATFORM_ANNOUNCE_TTL=10', 'PLATFORM_ANNOUNCE_TTL=20')), 'edited: kept');
  t.ok(keepsEnvironmentFile(renderUnitFiles({ ...defaultSettings, advertise: '10.0.0.1', listen: '10.0.0.1' }).get('platform.env')!), 'rendered for a machine before: kept');
});
