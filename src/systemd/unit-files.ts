import { announcedAs, defaultPorts, roles, type Role } from '../role-names.js';
import type { AuthMode } from '../auth/guard.js';

// The systemd units of one machine, as text: `<component>.service` for each role it runs and a
// `<component>-announce.service` sidekick for the directory, scheduler, orchestrator and web (the
// specification's layout), plus the environment file they all read. Pure, so the files in
// deploy/systemd/ are checked to be exactly what the defaults render (test/unit/unit-files.test.ts).
//
// Units name no machine: every per-machine setting lives in /etc/platform/platform.env, so the
// same unit files serve every machine and an operator edits one file.

export const ENVIRONMENT_FILE = '/etc/platform/platform.env';
export const DEFAULT_BIN = '/usr/local/bin/platform';

/** Roles whose announcement a sidekick writes; the gateway and agents announce themselves (agents register their machine). */
export const sidekickRoles: readonly Role[] = ['directory', 'scheduler', 'orchestrator', 'web'];

/** The gateway answers where people connect: port 80 on every address of the machine, HTTPS on 443. */
export const GATEWAY_PORT = 80;
export const GATEWAY_HTTPS_PORT = 443;

export interface MachineSettings {
  /** Roles this machine runs. */
  roles: Role[];
  /** The `platform` executable the units run. */
  bin: string;
  /** Every etcd member's client URL. */
  etcd: string[];
  /** The host other machines reach this one at (no port: each role adds its own). */
  advertise: string;
  /** Where the roles listen (the gateway listens on every address). */
  listen: string;
  etcdCa?: string;
  etcdCert?: string;
  etcdKey?: string;
  etcdUser?: string;
  etcdPasswordFile?: string;
  auth: AuthMode;
  domain: string;
}

export const defaultSettings: MachineSettings = {
  roles: [...roles],
  bin: DEFAULT_BIN,
  etcd: ['http://127.0.0.1:2379'],
  advertise: '127.0.0.1',
  listen: '127.0.0.1',
  auth: 'token',
  domain: 'platform.local',
};

const descriptions: Record<Role, string> = {
  directory: 'service directory (service declarations)',
  scheduler: 'scheduler (releases, deployments, placement; one leads)',
  orchestrator: 'orchestrator (the API for people, the CLI and the dashboard)',
  agent: 'agent (runs the units assigned to this machine on its Docker engine)',
  gateway: 'gateway (routes <service>.<domain> to healthy units)',
  web: 'dashboard',
};

export const unitName = (role: Role): string => `${announcedAs[role] ?? role}.service`;
export const sidekickName = (role: Role): string => `${announcedAs[role] ?? role}-announce.service`;
const portOf = (role: Role): number => (role === 'gateway' ? GATEWAY_PORT : defaultPorts[role]);
/** `$PLATFORM_AGENT_FLAGS`: more `platform serve` flags for one unit, from the environment file. */
export const extraFlagsVariable = (role: Role): string => `PLATFORM_${role.toUpperCase()}_FLAGS`;

/**
 * Roles that keep files, and their state directory under /var/lib (systemd makes it, owned by the
 * unit's user), passed as --data-dir: the gateway's HAProxy configuration, maps and sockets, the
 * scheduler's pre-migration backups (<data-dir>/backups, docs/upgrades.md).
 */
const stateDirectories: Partial<Record<Role, string>> = { gateway: 'platform-gateway', scheduler: 'platform-scheduler' };

const HEADER = '# Rendered by `platform systemd render` (docs/install.md); render again rather than edit.';

/**
 * What each role tolerates of systemd's sandboxing. Not MemoryDenyWriteExecute (V8 compiles code
 * at run time) nor PrivateUsers (it would unmap the docker group and the bind capability).
 *
 * A role (`serve`) may use netlink, read-only as its user is unprivileged: listening on every
 * address (the gateway always, any role with PLATFORM_HOST=0.0.0.0), it reads the machine's
 * addresses with os.networkInterfaces(), which asks the kernel over an AF_NETLINK socket. The Host
 * rule against DNS rebinding needs them (src/http/host-rule.ts: a machine's own addresses are
 * names it answers), and so does Fastify to log where it listens; without netlink the call fails
 * with EAFNOSUPPORT and the role exits at start, again and again (issue 30, defects 1 and 2).
 * A sidekick (`announce`) only connects out: no netlink.
 */
function hardening(role: Role, program: 'serve' | 'announce'): string[] {
  return [
    'User=platform',
    'Group=platform',
    // The Docker socket: membership of docker is root on this machine, hence only the agent.
    ...(role === 'agent' ? ['SupplementaryGroups=docker'] : []),
    ...(role === 'gateway' ? ['AmbientCapabilities=CAP_NET_BIND_SERVICE', 'CapabilityBoundingSet=CAP_NET_BIND_SERVICE'] : ['CapabilityBoundingSet=']),
    'NoNewPrivileges=yes',
    'ProtectSystem=strict',
    'ProtectHome=yes',
    'PrivateTmp=yes',
    'PrivateDevices=yes',
    'ProtectProc=invisible',
    'ProtectKernelTunables=yes',
    'ProtectKernelModules=yes',
    'ProtectKernelLogs=yes',
    'ProtectControlGroups=yes',
    'ProtectClock=yes',
    'ProtectHostname=yes',
    `RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6${program === 'serve' ? ' AF_NETLINK' : ''}`,
    'RestrictNamespaces=yes',
    'RestrictRealtime=yes',
    'RestrictSUIDSGID=yes',
    'LockPersonality=yes',
    'RemoveIPC=yes',
    'SystemCallArchitectures=native',
    'SystemCallFilter=@system-service',
    'SystemCallErrorNumber=EPERM',
    'UMask=0077',
  ];
}

/**
 * HAProxy outlives a restart of the gateway and the next gateway adopts it (docs/gateway.md):
 * systemd signals the gateway alone (not its whole control group), with SIGTERM on a restart
 * (`systemctl restart`, an upgrade) and SIGINT on a stop (`systemctl stop`, shutdown), on which
 * the gateway stops HAProxy too.
 */
const gatewayStop = ['KillMode=process', 'KillSignal=SIGINT', 'RestartKillSignal=SIGTERM'];

function serviceSection(execStart: string, role: Role, program: 'serve' | 'announce', stateDirectory?: string): string[] {
  return [
    '[Service]',
    'Type=exec',
    // ExecStart= names it; empty unless the environment file sets it (which overrides this):
    // systemd 257 (Debian 13) logs each unset variable ExecStart= names into the unit's journal.
    ...(program === 'serve' ? [`Environment=${extraFlagsVariable(role)}=`] : []),
    `EnvironmentFile=${ENVIRONMENT_FILE}`,
    `ExecStart=${execStart}`,
    'Restart=always',
    'RestartSec=2',
    'TimeoutStopSec=30',
    ...(stateDirectory ? [`StateDirectory=${stateDirectory}`] : []),
    // The scheduler's directory holds backups, and backups hold secrets.
    ...(stateDirectory && role === 'scheduler' ? ['StateDirectoryMode=0700'] : []),
    ...(role === 'gateway' ? gatewayStop : []),
    ...hardening(role, program),
  ];
}

function mainUnit(role: Role, settings: MachineSettings): string {
  const hasSidekick = sidekickRoles.includes(role);
  const after = ['network-online.target', 'etcd.service', ...(role === 'agent' ? ['docker.service'] : [])];
  const wants = ['network-online.target', ...(role === 'agent' ? ['docker.service'] : []), ...(hasSidekick ? [sidekickName(role)] : [])];
  const flags = [
    `--role ${role}`,
    `--port ${portOf(role)}`,
    ...(role === 'gateway' ? ['--host 0.0.0.0', `--https-port ${GATEWAY_HTTPS_PORT}`] : []),
    // Its writable directory: HAProxy's files (the gateway), backups (the scheduler).
    ...(stateDirectories[role] ? [`--data-dir /var/lib/${stateDirectories[role]}`] : []),
    // One key, one writer: the sidekick announces, and only while the role answers.
    ...(hasSidekick ? ['--no-announce'] : []),
    `$${extraFlagsVariable(role)}`,
  ];
  return lines([
    HEADER,
    '[Unit]',
    `Description=platform ${descriptions[role]}`,
    `After=${after.join(' ')}`,
    `Wants=${wants.join(' ')}`,
    // Keep restarting while etcd or Docker is away, instead of giving up after five tries.
    'StartLimitIntervalSec=0',
    '',
    ...serviceSection(`${settings.bin} serve ${flags.join(' ')}`, role, 'serve', stateDirectories[role]),
    '',
    '[Install]',
    'WantedBy=multi-user.target',
    // `systemctl enable <role>` enables its sidekick too, which then shows as enabled, not disabled
    // (issue 30, defect 5: Wants= started it, but nothing enabled it), and `disable` disables both.
    ...(hasSidekick ? [`Also=${sidekickName(role)}`] : []),
  ]);
}

function sidekickUnit(role: Role, settings: MachineSettings): string {
  const component = announcedAs[role]!;
  return lines([
    HEADER,
    '[Unit]',
    `Description=platform: announce the ${descriptions[role]} at /platform/services/${component} while it answers`,
    `BindsTo=${unitName(role)}`,
    `After=${unitName(role)}`,
    'StartLimitIntervalSec=0',
    '',
    ...serviceSection(`${settings.bin} announce --role ${component} --address \${PLATFORM_ADVERTISE}:${portOf(role)}`, role, 'announce'),
    '',
    '[Install]',
    `WantedBy=${unitName(role)}`,
  ]);
}

const commented = (name: string, value: string | undefined, example: string): string => (value === undefined ? `#${name}=${example}` : `${name}=${value}`);

function environmentFile(settings: MachineSettings): string {
  const present = settings.roles;
  return lines([
    '# /etc/platform/platform.env: the settings every platform unit on this machine reads (EnvironmentFile=).',
    '# Rendered by `platform systemd render`; keep it root-only (chmod 600): it may hold secrets. After a change:',
    '# systemctl restart the units (docs/install.md).',
    '',
    '# Where this machine\'s roles listen, and the host other machines reach them at (no port: each role adds its own).',
    `PLATFORM_HOST=${settings.listen}`,
    `PLATFORM_ADVERTISE=${settings.advertise}`,
    ...(present.includes('agent') ? ['# The agent: the host units\' published ports are reached at from other machines.', `PLATFORM_UNIT_HOST=${settings.advertise}`] : []),
    '',
    '# etcd: every member\'s client URL, comma-separated, and how to reach it (docs/security.md "Securing etcd").',
    '# Files must be readable by the platform group (chown root:platform, chmod 640).',
    `PLATFORM_ETCD=${settings.etcd.join(',')}`,
    commented('PLATFORM_ETCD_CA', settings.etcdCa, '/etc/platform/etcd-ca.pem'),
    commented('PLATFORM_ETCD_CERT', settings.etcdCert, '/etc/platform/etcd-client.pem'),
    commented('PLATFORM_ETCD_KEY', settings.etcdKey, '/etc/platform/etcd-client-key.pem'),
    commented('PLATFORM_ETCD_USER', settings.etcdUser, 'platform'),
    commented('PLATFORM_ETCD_PASSWORD_FILE', settings.etcdPasswordFile, '/etc/platform/etcd-password'),
    '',
    '# Who may call the APIs (docs/access.md "Access tokens"): token = every call needs one. Same on every machine.',
    `PLATFORM_AUTH=${settings.auth}`,
    `PLATFORM_DOMAIN=${settings.domain}`,
    '#PLATFORM_INTERNAL_DOMAIN=platform.internal',
    '# TTL of announcements and machine leases, seconds.',
    'PLATFORM_ANNOUNCE_TTL=10',
    '#PLATFORM_LOG_LEVEL=info',
    ...(present.includes('agent')
      ? [
          '',
          '# The agent: how much output of each unit the engine keeps (platform logs reads it).',
          '#PLATFORM_LOG_MAX_SIZE=10m',
          '#PLATFORM_LOG_MAX_FILES=3',
          '# The user host-network units run as (0:0 gives them root), and the memory limit of units declared without one, MB.',
          '#PLATFORM_HOST_NETWORK_USER=65534:65534',
          '#PLATFORM_DEFAULT_MEMORY_LIMIT=1024',
          '# The most units this machine takes (its capacity in units; memory and CPUs are counted besides).',
          '#PLATFORM_MAX_UNITS=100',
        ]
      : []),
    ...(present.includes('gateway')
      ? [
          '',
          '# The gateway: haproxy, node, or auto (HAProxy when installed); the HTTPS listener (off to turn it off);',
          '# ACME certificates for public services when an email is set (docs/gateway.md "HTTPS"); the internal listener.',
          '#PLATFORM_GATEWAY_DATA_PLANE=auto',
          '#PLATFORM_HTTPS_PORT=8443',
          '#PLATFORM_ACME_EMAIL=ops@example.com',
          '#PLATFORM_ACME_DIRECTORY=https://acme-v02.api.letsencrypt.org/directory',
          '#PLATFORM_GATEWAY_INTERNAL_HOST=10.0.0.2',
          '#PLATFORM_GATEWAY_INTERNAL_PORT=8081',
        ]
      : []),
    ...(present.includes('scheduler')
      ? [
          '',
          '# The scheduler: how long a machine may report no engine before its units run elsewhere, seconds.',
          '#PLATFORM_ENGINE_GRACE=30',
          '# How long a machine whose agent stopped on purpose (systemctl restart, a reboot) keeps its units (docs/cluster.md).',
          '#PLATFORM_MACHINE_GRACE=5m',
          '# Where the scheduler leader writes backups (docs/operations.md "Scheduled backups"): with this set, a verified',
          '# one every PLATFORM_BACKUP_INTERVAL, the newest PLATFORM_BACKUP_KEEP kept; and always the one it takes before',
          '# migrating the store\'s schema (docs/upgrades.md; default /var/lib/platform-scheduler/backups).',
          '#PLATFORM_BACKUP_DIR=/var/lib/platform-scheduler/backups',
          '#PLATFORM_BACKUP_INTERVAL=1h',
          '#PLATFORM_BACKUP_KEEP=48',
          '# Registries on private addresses deploys may use, and the registry webhooks\' secrets.',
          '#PLATFORM_ALLOWED_REGISTRIES=registry.internal:5000',
          '#PLATFORM_REGISTRY_WEBHOOK_TOKEN=',
          '#PLATFORM_DOCKERHUB_WEBHOOK_TOKEN=',
          '#PLATFORM_GITHUB_WEBHOOK_SECRET=',
          '# Notification receivers on private addresses (docs/notifications.md).',
          '#PLATFORM_ALLOWED_NOTIFICATION_DESTINATIONS=hooks.internal:8443',
          '# What one token may make the store keep, and the store size above which API writes get 507 (docs/configuration.md "Store space").',
          '#PLATFORM_WRITE_BUDGET=64m',
          '#PLATFORM_STORE_SPACE_LIMIT=1536m',
        ]
      : []),
    '',
    '# More `platform serve` flags for one unit, split at spaces, for example:',
    ...present.map((role) => `#${extraFlagsVariable(role)}=${exampleFlags[role]}`),
  ]);
}

const exampleFlags: Record<Role, string> = {
  directory: '--log-level debug',
  scheduler: '--insecure-registry registry.internal:5000',
  orchestrator: '--cors-origin https://ops.example.com',
  agent: '"--label zone=a --label disk=ssd"',
  gateway: '--expose-components',
  web: '--log-level debug',
};

const lines = (text: string[]): string => `${text.join('\n')}\n`;

/** File name → content: the units of the chosen roles and `platform.env`. */
export function renderUnitFiles(settings: MachineSettings): Map<string, string> {
  const files = new Map<string, string>();
  for (const role of roles.filter((role) => settings.roles.includes(role))) {
    files.set(unitName(role), mainUnit(role, settings));
    if (sidekickRoles.includes(role)) files.set(sidekickName(role), sidekickUnit(role, settings));
  }
  files.set('platform.env', environmentFile(settings));
  return files;
}
