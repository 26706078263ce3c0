import { mkdir, readFile } from 'node:fs/promises';
import { isAbsolute, join } from 'node:path';
import { Option, type Command } from 'commander';
import { ConfigError } from '../config-error.js';
import { writeFileDurably } from '../atomic-file.js';
import { parseRoles } from '../role-names.js';
import { authModes, type AuthMode } from '../auth/guard.js';
import { defaultSettings, ENVIRONMENT_FILE, renderUnitFiles, type MachineSettings } from './unit-files.js';

// `platform systemd render`: writes one machine's systemd units (and its environment file), so an
// operator renders them instead of editing them by hand.

interface RenderFlags {
  roles?: string;
  etcd?: string;
  advertise?: string;
  listen?: string;
  bin?: string;
  etcdCa?: string;
  etcdCert?: string;
  etcdKey?: string;
  etcdUser?: string;
  etcdPasswordFile?: string;
  auth?: string;
  domain?: string;
  out?: string;
  force?: boolean;
}

export function addUnitsCommands(program: Command): void {
  const units = program.command('systemd').description('systemd units for running the platform on a machine (docs/install.md).');
  units
    .command('render')
    .description(`Write the units of this machine's roles to /etc/systemd/system and their settings to ${ENVIRONMENT_FILE} (or all into --out).`)
    .option('--roles <roles>', 'comma-separated roles this machine runs: directory, scheduler, orchestrator, agent, gateway, web (default: all)')
    .option('--etcd <urls>', `every etcd member's client URL, comma-separated (default ${defaultSettings.etcd.join(',')})`)
    .option('--advertise <host>', `the address other machines reach this one at (default ${defaultSettings.advertise})`)
    .option('--listen <host>', 'where the roles listen (default: --advertise; the gateway listens on every address)')
    .option('--bin <path>', `the platform executable (env PLATFORM_BIN, which the Debian package's /usr/bin/platform sets to itself; default ${defaultSettings.bin})`)
    .option('--etcd-ca <file>', 'PEM CA that signed etcd\'s certificate, as it will be on the machine')
    .option('--etcd-cert <file>', 'PEM client certificate for etcd')
    .option('--etcd-key <file>', 'its private key')
    .option('--etcd-user <name>', 'etcd user')
    .option('--etcd-password-file <file>', 'file holding the etcd user\'s password')
    .addOption(new Option('--auth <mode>', 'who may call the APIs').choices(authModes).default(defaultSettings.auth))
    .option('--domain <domain>', `domain services are reached under (default ${defaultSettings.domain})`)
    .option('--out <dir>', 'write every file into this directory instead')
    .option('--force', "replace an existing platform.env (units are always replaced; the Debian package's untouched one is replaced without it)")
    .action(async (flags: RenderFlags) => {
      const settings = machineSettings(flags);
      const written = await writeUnitFiles(renderUnitFiles(settings), flags.out, flags.force ?? false);
      for (const line of written) process.stdout.write(`${line}\n`);
      if (!flags.out) {
        const names = [...renderUnitFiles(settings).keys()].filter((name) => !name.includes('-announce') && name.endsWith('.service'));
        process.stdout.write(`next: systemctl daemon-reload && systemctl enable --now ${names.join(' ')}\n`);
      }
    });
}

/**
 * Render flags → settings, checked so a typo stops here rather than in a unit at boot. The
 * executable is `--bin`, else `PLATFORM_BIN`: the Debian package's /usr/bin/platform names itself
 * there, so units rendered on a machine that installed the package run it (docs/debian-package.md).
 */
export function machineSettings(flags: RenderFlags, env: NodeJS.ProcessEnv = process.env): MachineSettings {
  const bin = flags.bin ?? (env.PLATFORM_BIN || undefined);
  const etcd = flags.etcd === undefined ? defaultSettings.etcd : flags.etcd.split(',').map((url) => url.trim()).filter(Boolean);
  for (const url of etcd) {
    if (!/^https?:\/\/[^\s/]+\/?$/.test(url)) throw new ConfigError(`--etcd takes URLs such as https://10.0.0.1:2379, got ${url}`);
  }
  if (etcd.length === 0) throw new ConfigError('--etcd needs at least one URL');
  const advertise = flags.advertise ?? defaultSettings.advertise;
  const hostPattern = /^[a-zA-Z0-9.-]+$|^\[[0-9a-fA-F:]+\]$/;
  if (!hostPattern.test(advertise)) throw new ConfigError(`--advertise takes a host name or address without a port (each role adds its own), got ${advertise}`);
  const listen = flags.listen ?? advertise;
  if (!hostPattern.test(listen) && !/^[0-9a-fA-F:]+$/.test(listen)) throw new ConfigError(`--listen takes an address, got ${listen}`);
  for (const [flag, path] of [[flags.bin === undefined ? 'PLATFORM_BIN' : '--bin', bin], ['--etcd-ca', flags.etcdCa], ['--etcd-cert', flags.etcdCert], ['--etcd-key', flags.etcdKey], ['--etcd-password-file', flags.etcdPasswordFile]] as const) {
    if (path !== undefined && (!isAbsolute(path) || /\s/.test(path))) throw new ConfigError(`${flag} takes an absolute path without spaces, got ${path}`);
  }
  if (Boolean(flags.etcdCert) !== Boolean(flags.etcdKey)) throw new ConfigError('--etcd-cert and --etcd-key go together');
  const tls = flags.etcdCa || flags.etcdCert;
  const plain = etcd.find((url) => !url.startsWith('https://'));
  if (tls && plain) throw new ConfigError(`--etcd-ca and --etcd-cert need https:// etcd URLs, got ${plain}`);
  const domain = flags.domain ?? defaultSettings.domain;
  if (!/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/.test(domain)) throw new ConfigError(`--domain must be a DNS name, got ${domain}`);
  return {
    roles: flags.roles === undefined ? defaultSettings.roles : machineRoles(flags.roles),
    bin: bin ?? defaultSettings.bin,
    etcd,
    advertise,
    listen,
    ...(flags.etcdCa ? { etcdCa: flags.etcdCa } : {}),
    ...(flags.etcdCert ? { etcdCert: flags.etcdCert } : {}),
    ...(flags.etcdKey ? { etcdKey: flags.etcdKey } : {}),
    ...(flags.etcdUser ? { etcdUser: flags.etcdUser } : {}),
    ...(flags.etcdPasswordFile ? { etcdPasswordFile: flags.etcdPasswordFile } : {}),
    auth: (flags.auth ?? defaultSettings.auth) as AuthMode,
    domain,
  };
}

function machineRoles(text: string): MachineSettings['roles'] {
  try {
    return parseRoles(text);
  } catch (error) {
    throw new ConfigError((error as Error).message.replace(/^--role\b/, '--roles'));
  }
}

/** Writes each file through a temporary name (a half-written unit never loads); returns what it did, one line each. */
async function writeUnitFiles(files: Map<string, string>, out: string | undefined, force: boolean): Promise<string[]> {
  const done: string[] = [];
  for (const [name, content] of files) {
    const isEnv = name === 'platform.env';
    const path = out ? join(out, name) : isEnv ? ENVIRONMENT_FILE : join('/etc/systemd/system', name);
    if (isEnv && !force && keepsEnvironmentFile(await readIfExists(path))) {
      done.push(`kept ${path} (it exists; --force replaces it)`);
      continue;
    }
    await mkdir(join(path, '..'), { recursive: true });
    await writeFileDurably(path, content, { mode: isEnv ? 0o600 : 0o644 });
    done.push(`wrote ${path}`);
  }
  return done;
}

const readIfExists = (path: string): Promise<string | undefined> => readFile(path, 'utf8').catch(() => undefined);

/**
 * Whether render (without --force) keeps the platform.env it finds: any file but the one the
 * Debian package installs, which is render's defaults (one machine, etcd on 127.0.0.1) untouched.
 * That one holds no operator's setting, and keeping it would leave the units just rendered for
 * this machine reading etcd on 127.0.0.1 (the install of docs/install.md on a fresh machine).
 */
export function keepsEnvironmentFile(existing: string | undefined): boolean {
  return existing !== undefined && existing !== renderUnitFiles(defaultSettings).get('platform.env');
}
