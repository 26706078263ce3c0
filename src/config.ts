import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';
import type { EtcdSecurity } from './store/etcd-store.js';
import { machineIdPattern } from './schemas/cluster.js';
import { authModes, type AuthMode } from './auth/guard.js';
import { RegistryAllowList } from './http/registry-policy.js';
import { parseAllowedHosts } from './http/host-rule.js';
import { defaultRetryPolicy, type RetryPolicy } from './notifications/retry-schedule.js';
import { DurationError, parseDuration } from './auth/duration.js';
import { DEFAULT_WRITE_BUDGET } from './auth/write-budget.js';
import { DEFAULT_STORE_SPACE_LIMIT_BYTES } from './store/store-space.js';
import { ConfigError } from './config-error.js';
import { announcedAs, defaultPorts, parseRoles, roles, type Role } from './role-names.js';

export { ConfigError, announcedAs, defaultPorts, parseRoles, roles, type Role };

// Flags and environment → one typed config. Every role reads its settings from here.

/** How long a machine may go without a Docker engine before its units move (--engine-grace). */
export const defaultEngineGraceSeconds = 30;

/**
 * How long a machine whose agent stopped on purpose keeps its units (--machine-grace): a server's
 * reboot (firmware, RAID and NIC initialisation, then the OS and dockerd) commonly takes 1 to 3
 * minutes, and a package upgrade's restart a few seconds; 5 minutes covers both with room, while
 * a machine that does not come back costs its units no more than 5 minutes (those without
 * another instance elsewhere are down for that long).
 */
export const defaultMachineGraceMs = 5 * 60_000;

/** What `platform up` runs when no role is named (roles join it as they are built). */
export const upRoles: Role[] = ['directory', 'scheduler', 'orchestrator', 'agent', 'gateway', 'web'];

export type LogFormat = 'pretty' | 'json';

/** Readable lines when a person watches the terminal; JSON for files, pipes and log collectors. */
function logFormat(text: string | undefined): LogFormat {
  if (text === undefined) return process.stdout.isTTY ? 'pretty' : 'json';
  if (text !== 'pretty' && text !== 'json') throw new ConfigError(`--log-format must be pretty or json, got ${text}`);
  return text;
}

export interface PlatformConfig {
  roles: Role[];
  host: string;
  /** Only with a single role; otherwise each role listens on its `ports` entry, else its default port. */
  port?: number;
  /** --ports role=port,… (env PLATFORM_PORTS): roles moved off their default ports, for `platform up` and several roles. */
  ports: Partial<Record<Role, number>>;
  /** host[:port] other roles reach this process at. */
  advertiseHost: string;
  advertisePort?: number;
  etcd?: string[];
  /** TLS material and user for etcd (docs/security.md "Securing etcd"); empty without them. */
  etcdSecurity: EtcdSecurity;
  dataDir: string;
  domain: string;
  announceTtlSeconds: number;
  /** How often gateways close an interval of request counts and agents read their units' CPU and memory (the graphs' resolution). */
  metricsIntervalSeconds: number;
  /** Whether the roles write their own `/platform/services/<name>` key; off when a `platform announce` sidekick does (--no-announce). */
  announce: boolean;
  logLevel: string;
  /** `pretty`: readable lines for people (the default on a terminal); `json`: one JSON object a line. */
  logFormat: LogFormat;
  /** Who may call the roles' APIs (docs/access.md "Access tokens"). */
  auth: AuthMode;
  /** Origins whose pages may call the APIs from a browser (--cors-origin); none by default. */
  corsOrigins: string[];
  /** Host names the API roles answer besides their own addresses and localhost (--allowed-host; src/http/host-rule.ts). */
  allowedHosts: string[];
  /**
   * Notification endpoints on loopback, private or link-local addresses the operator allows
   * (--allowed-notification-destination): checked by the orchestrator when one is added, by the scheduler at each delivery.
   */
  allowedNotificationDestinations: string[];
  agent: AgentConfig;
  scheduler: SchedulerConfig;
  gateway: GatewayConfig;
  http: HttpLimitsConfig;
  peers: { directoryUrl?: string; schedulerUrl?: string; orchestratorUrl?: string };
  /** What one token's calls may make the store keep, per window (src/auth/write-budget.ts). */
  writeBudget: { bytes: number; windowMs: number };
  /** Store size above which API callers' writes are refused with 507 (src/store/store-space.ts). */
  storeSpaceLimitBytes: number;
  /** Memory (MB) the directory gives units declared without a limit; unset: none. */
  defaultUnitMemoryMB: number | undefined;
}

export interface AgentConfig {
  machineId: string;
  network: 'bridge' | 'host';
  dockerHost?: string;
  unitHost: string;
  stopGraceSeconds: number;
  drainSeconds: number;
  labels: Record<string, string>;
  /** Most units the machine takes (--max-units, PLATFORM_MAX_UNITS): its capacity in units, as the planner counts it. */
  maxUnits: number;
  /** Held back from the engine's memory (MB) and CPUs for the agent, the engine and the system. */
  reserveMemoryMB: number;
  reserveCpus: number;
  /** The operator's cap: reported instead of the engine's figure less the reserve. */
  capacityMemoryMB?: number;
  capacityCpus?: number;
  /** How much output of each unit container the engine keeps (--log-max-size, --log-max-files). */
  unitLogs: UnitLogRotation;
  /** `uid[:gid]` units on host networking run as (--host-network-user); `0:0` gives them root back. */
  hostNetworkUser: string;
  /** The memory limit, in MB, of a unit declared without one (--default-memory-limit); 0: none. */
  defaultMemoryLimitMB: number;
}

/**
 * A unit declared without memory would otherwise have no limit and could take its machine's
 * memory from every other unit; this bounds it (a limit only: placement reserves nothing for it).
 */
export const defaultMemoryLimitMB = 1024;

/**
 * Host networking shares the machine's ports with the platform, so its units run as nobody unless
 * the operator says otherwise: not root on the host's network (no binding beside a root-owned
 * listener with SO_REUSEPORT, no privileged ports).
 */
export const defaultHostNetworkUser = '65534:65534';

/** Docker's json-file rotation of a unit's output: at most `maxFiles` files of `maxSize` each. */
export interface UnitLogRotation {
  /** Docker's size notation: a number and k, m or g (e.g. 10m). */
  maxSize: string;
  maxFiles: number;
}

/** 10 MB × 3: a unit's output costs its machine at most 30 MB of disk. */
export const defaultUnitLogs: UnitLogRotation = { maxSize: '10m', maxFiles: 3 };

function logMaxSize(text: string | undefined): string {
  if (text === undefined) return defaultUnitLogs.maxSize;
  const size = text.trim().toLowerCase();
  if (!/^[1-9][0-9]{0,5}[kmg]$/.test(size) || (size.endsWith('k') && Number(size.slice(0, -1)) < 64)) {
    throw new ConfigError(`--log-max-size must be a size such as 10m: a whole number and k, m or g, at least 64k, got ${text}`);
  }
  return size;
}

/**
 * Memory is what a full machine loses first (the kernel kills the agent or the engine), so some
 * is held back by default; CPUs over-committed only slow units down, so none is.
 */
export const defaultReserve = { memoryMB: 512, cpus: 0 } as const;

/**
 * Units one machine takes unless its agent says otherwise (--max-units): a bound on containers per
 * engine, whatever their memory and CPUs (which are counted besides, when declared).
 */
export const defaultMaxUnits = 100;
const MAX_UNITS_LIMIT = 100_000;

export interface GatewayConfig {
  /** `<service>.<internalDomain>` reaches every load-balanced service; `<service>.<domain>` only public-facing ones. */
  internalDomain: string;
  /** Route `orchestrator.<domain>`, `web.<domain>` (and, internally, the directory and scheduler) to their announcements. */
  exposeComponents: boolean;
  /** How long an upstream may take to send its response headers (504 after). */
  requestTimeoutSeconds: number;
  /** Idle client keep-alive connections and silent upstream response bodies are closed after this. */
  idleTimeoutSeconds: number;
  /** Largest request head accepted (431 above it). */
  maxHeaderSize: number;
  /** Most connections the gateway opens to one unit. */
  upstreamConnections: number;
  /** Who forwards requests: HAProxy driven through its Runtime API, the built-in Node proxy, or HAProxy when one of 2.6+ is found. */
  dataPlane: DataPlaneChoice;
  /** The haproxy executable; unset: `haproxy` on the PATH. */
  haproxyBin?: string;
  /** Where the internal domain is served when the gateway listens on an address that is not loopback. */
  internalHost: string;
  /** Its port; unset: the gateway's port + 1. */
  internalPort?: number;
  tls: GatewayTlsConfig;
}

/** HTTPS on the gateway (docs/gateway.md "HTTPS"). */
export interface GatewayTlsConfig {
  /** Port of the HTTPS listener; undefined with --https-port off (0: any free port). */
  httpsPort: number | undefined;
  /** Plain-HTTP requests for public hosts get 308 to HTTPS. */
  httpsRedirect: boolean;
  /** Strict-Transport-Security max-age on HTTPS answers for public hosts; undefined: not sent. */
  hstsMaxAgeSeconds: number | undefined;
  /** Certificates from ACME for every public host; undefined: operator certificates only. */
  acme: AcmeConfig | undefined;
}

export interface AcmeConfig {
  directoryUrl: string;
  email: string;
  /** PEM CA certificates trusted for the ACME server's own HTTPS, besides Node's. */
  caFile: string | undefined;
}

export const LETS_ENCRYPT_DIRECTORY = 'https://acme-v02.api.letsencrypt.org/directory';

export const dataPlaneChoices = ['auto', 'haproxy', 'node'] as const;
export type DataPlaneChoice = (typeof dataPlaneChoices)[number];

/** How long clients may take to send a request and how many connections they may hold (docs/security.md "Limits a client can hit"). */
export interface HttpLimitsConfig {
  /** A request head must arrive within this. */
  headersTimeoutSeconds: number;
  /** A whole request, head and body, must arrive within this; unset: 30 s on API roles, 300 s on the gateway (uploads). */
  bodyTimeoutSeconds?: number;
  /** Connections one role server holds at once. */
  maxConnections: number;
  /** Connections one client address holds to one role server at once. */
  maxConnectionsPerAddress: number;
}

/** One secret per registry webhook; a hook without one accepts only local calls on a loopback listener. */
export interface WebhookSecrets {
  /** `Authorization: Bearer` token of POST /hooks/registry (PLATFORM_REGISTRY_WEBHOOK_TOKEN). */
  registryToken?: string;
  /** `?token=` of POST /hooks/dockerhub (PLATFORM_DOCKERHUB_WEBHOOK_TOKEN). */
  dockerHubToken?: string;
  /** HMAC key of POST /hooks/github's X-Hub-Signature-256 (PLATFORM_GITHUB_WEBHOOK_SECRET). */
  gitHubSecret?: string;
}

/** How much history the leading scheduler keeps (src/roles/scheduler/housekeeping/retention.ts). */
export interface RetentionLimits {
  /** Finished deployments kept per service, newest first (in-flight ones are always kept). */
  deploymentsPerService: number;
  /** Journal entries kept, newest first, over all services. */
  journalEntries: number;
  /** Releases kept per service, newest first (the ones deployments in flight or the last success use are always kept). */
  releasesPerService: number;
}

export const defaultRetention: RetentionLimits = { deploymentsPerService: 50, journalEntries: 10_000, releasesPerService: 50 };

export interface SchedulerConfig {
  insecureRegistries: string[];
  /** Registries on loopback, private or link-local addresses that deploys may use (docs/deploys.md "Registries"). */
  allowedRegistries: string[];
  webhooks: WebhookSecrets;
  retention: RetentionLimits;
  /** Outbound notifications (docs/notifications.md). */
  notify: { policy: RetryPolicy; timeoutMs: number };
  /** Seconds a machine may have no Docker engine before its units move elsewhere (docs/cluster.md). */
  engineGraceSeconds: number;
  /** How long a machine whose agent stopped on purpose (a restart, a reboot) keeps its units, ms (docs/cluster.md). */
  machineGraceMs: number;
  /** The leader's scheduled backups (docs/operations.md "Scheduled backups"); none without --backup-dir. */
  backups?: BackupSchedule;
  /** Where the leader writes the backup it takes before migrating the store's schema (--backup-dir; default <data-dir>/backups). */
  backupDir: string;
}

export interface BackupSchedule {
  /** An absolute directory, created 0700 when missing. */
  dir: string;
  intervalMs: number;
  /** Verified backups kept, newest first. */
  keep: number;
}

/** The shortest --backup-interval: short enough for tests and drills; production wants hours. */
export const MIN_BACKUP_INTERVAL_MS = 5_000;
const DEFAULT_BACKUP_INTERVAL = '1h';
const DEFAULT_BACKUP_KEEP = 48;

export interface RawFlags {
  role?: string;
  host?: string;
  port?: string;
  ports?: string;
  advertise?: string;
  etcd?: string;
  etcdCa?: string;
  etcdCert?: string;
  etcdKey?: string;
  etcdUser?: string;
  etcdPassword?: string;
  etcdPasswordFile?: string;
  dataDir?: string;
  domain?: string;
  network?: string;
  machineId?: string;
  unitHost?: string;
  hostNetworkUser?: string;
  defaultMemoryLimit?: string;
  stopGrace?: string;
  drainSeconds?: string;
  logMaxSize?: string;
  logMaxFiles?: string;
  label?: string[];
  reserveMemory?: string;
  reserveCpus?: string;
  capacityMemory?: string;
  capacityCpus?: string;
  maxUnits?: string;
  announceTtl?: string;
  metricsInterval?: string;
  /** false with --no-announce (commander's negated option); undefined or true otherwise. */
  announce?: boolean;
  logLevel?: string;
  logFormat?: string;
  auth?: string;
  corsOrigin?: string;
  allowedHost?: string;
  insecureRegistry?: string[];
  allowedRegistry?: string[];
  allowedNotificationDestination?: string[];
  registryWebhookToken?: string;
  dockerhubWebhookToken?: string;
  githubWebhookSecret?: string;
  directoryUrl?: string;
  schedulerUrl?: string;
  orchestratorUrl?: string;
  internalDomain?: string;
  exposeComponents?: boolean;
  requestTimeout?: string;
  idleTimeout?: string;
  maxHeaderSize?: string;
  upstreamConnections?: string;
  httpsPort?: string;
  httpsRedirect?: boolean;
  hstsMaxAge?: string;
  acmeEmail?: string;
  acmeDirectory?: string;
  acmeCaFile?: string;
  dataPlane?: string;
  haproxyBin?: string;
  internalHost?: string;
  internalPort?: string;
  headersTimeout?: string;
  bodyTimeout?: string;
  maxConnections?: string;
  maxConnectionsPerAddress?: string;
  keepDeployments?: string;
  engineGrace?: string;
  machineGrace?: string;
  backupDir?: string;
  backupInterval?: string;
  backupKeep?: string;
  keepJournal?: string;
  keepReleases?: string;
  writeBudget?: string;
  writeBudgetWindow?: string;
  storeSpaceLimit?: string;
  defaultUnitMemory?: string;
  notifyRetry?: string;
  notifyGiveUp?: string;
  notifyTimeout?: string;
}

const sizeUnits: Record<string, number> = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3 };

/** A size as people type it: a whole number of bytes, or of k, m or g (binary units). */
function byteSize(flag: string, text: string | undefined, min: number): number | undefined {
  if (text === undefined) return undefined;
  const match = /^([0-9]{1,15})([kmg]?)$/.exec(text.trim().toLowerCase());
  const bytes = match ? Number(match[1]) * sizeUnits[match[2]!]! : NaN;
  if (!(bytes >= min)) throw new ConfigError(`${flag} must be a size such as 512m: a whole number of bytes, or of k, m or g, at least ${min}, got ${text}`);
  return bytes;
}

/** --machine-grace: a duration of at most a day (a machine away longer is gone, and its units should run elsewhere). */
function machineGrace(text: string | undefined): number {
  const ms = duration('--machine-grace', text) ?? defaultMachineGraceMs;
  if (ms > 86_400_000) throw new ConfigError(`--machine-grace: at most 1d, got ${text}`);
  return ms;
}

/** --backup-dir, --backup-interval, --backup-keep (or their PLATFORM_BACKUP_* variables); the last two need the first. */
function resolveBackupSchedule(flags: RawFlags, env: NodeJS.ProcessEnv): { backups?: BackupSchedule } {
  const dir = flags.backupDir ?? (env.PLATFORM_BACKUP_DIR || undefined);
  const intervalText = flags.backupInterval ?? (env.PLATFORM_BACKUP_INTERVAL || undefined);
  const keepText = flags.backupKeep ?? (env.PLATFORM_BACKUP_KEEP || undefined);
  if (dir === undefined) {
    if (intervalText !== undefined || keepText !== undefined) throw new ConfigError('--backup-interval and --backup-keep need --backup-dir (or PLATFORM_BACKUP_DIR): where the backups go');
    return {};
  }
  if (!isAbsolute(dir)) throw new ConfigError(`--backup-dir must be an absolute path, got ${dir}`);
  const intervalMs = duration('--backup-interval', intervalText ?? DEFAULT_BACKUP_INTERVAL)!;
  if (intervalMs < MIN_BACKUP_INTERVAL_MS) throw new ConfigError(`--backup-interval must be at least ${MIN_BACKUP_INTERVAL_MS / 1000}s, got ${intervalText}`);
  const keep = integer('--backup-keep', keepText, 1, 100_000) ?? DEFAULT_BACKUP_KEEP;
  return { backups: { dir: resolve(dir), intervalMs, keep } };
}

function duration(flag: string, text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  try {
    return parseDuration(text);
  } catch (error) {
    if (error instanceof DurationError) throw new ConfigError(`${flag}: ${error.message}`);
    throw error;
  }
}

function resolveNotify(flags: RawFlags): SchedulerConfig['notify'] {
  const firstRetryMs = duration('--notify-retry', flags.notifyRetry) ?? defaultRetryPolicy.firstRetryMs;
  const giveUpAfterMs = duration('--notify-give-up', flags.notifyGiveUp) ?? defaultRetryPolicy.giveUpAfterMs;
  if (firstRetryMs > giveUpAfterMs) throw new ConfigError(`--notify-retry (${flags.notifyRetry ?? '10s'}) must not be longer than --notify-give-up (${flags.notifyGiveUp ?? '24h'})`);
  return {
    policy: { firstRetryMs, giveUpAfterMs, maxRetryMs: Math.min(defaultRetryPolicy.maxRetryMs, giveUpAfterMs) },
    timeoutMs: (integer('--notify-timeout', flags.notifyTimeout, 1, 300) ?? 10) * 1000,
  };
}

function decimal(flag: string, text: string | undefined, min: number, max: number): number | undefined {
  if (text === undefined) return undefined;
  const value = Number(text);
  if (text.trim() === '' || !Number.isFinite(value) || value < min || value > max) throw new ConfigError(`${flag} must be a number from ${min} to ${max}, got ${text}`);
  return value;
}

/** What the agent holds back from the engine's resources, or the cap an operator sets instead. */
function resolveAgentResources(flags: RawFlags): Pick<AgentConfig, 'reserveMemoryMB' | 'reserveCpus' | 'capacityMemoryMB' | 'capacityCpus'> {
  const capacityMemoryMB = integer('--capacity-memory', flags.capacityMemory, 0, 1_073_741_824);
  const capacityCpus = decimal('--capacity-cpus', flags.capacityCpus, 0, 4096);
  return {
    reserveMemoryMB: integer('--reserve-memory', flags.reserveMemory, 0, 1_073_741_824) ?? defaultReserve.memoryMB,
    reserveCpus: decimal('--reserve-cpus', flags.reserveCpus, 0, 4096) ?? defaultReserve.cpus,
    ...(capacityMemoryMB === undefined ? {} : { capacityMemoryMB }),
    ...(capacityCpus === undefined ? {} : { capacityCpus }),
  };
}

function integer(flag: string, text: string | undefined, min: number, max: number): number | undefined {
  if (text === undefined) return undefined;
  const value = Number(text);
  if (!Number.isInteger(value) || value < min || value > max) throw new ConfigError(`${flag} must be an integer from ${min} to ${max}, got ${text}`);
  return value;
}

/** --ports: `role=port` pairs, comma-separated, each a role this process runs, no two on one port. */
function rolePorts(text: string | undefined, chosen: readonly Role[]): Partial<Record<Role, number>> {
  const ports: Partial<Record<Role, number>> = {};
  if (text === undefined) return ports;
  for (const pair of text.split(',').map((part) => part.trim()).filter(Boolean)) {
    const match = /^([a-z]+)=(.*)$/.exec(pair);
    if (!match) throw new ConfigError(`--ports takes role=port pairs, comma-separated (e.g. orchestrator=9100,gateway=8088), got ${pair}`);
    const role = match[1] as Role;
    if (!(roles as readonly string[]).includes(role)) throw new ConfigError(`--ports: unknown role ${role} (roles: ${roles.join(', ')})`);
    if (!chosen.includes(role)) throw new ConfigError(`--ports names ${role}, which this process does not run (it runs ${chosen.join(', ')})`);
    ports[role] = integer(`--ports ${role}`, match[2], 1, 65535)!;
  }
  const taken = new Map<number, Role>();
  for (const role of chosen) {
    const rolePort = ports[role] ?? defaultPorts[role];
    const other = taken.get(rolePort);
    if (other) throw new ConfigError(`--ports: ${other} and ${role} would both listen on port ${rolePort}`);
    taken.set(rolePort, role);
  }
  return ports;
}

export function defaultMachineId(): string {
  try {
    const id = readFileSync('/etc/machine-id', 'utf8').trim();
    if (id) return id;
  } catch {
    // no machine-id on this host: fall back to the host name
  }
  return hostname();
}

function parseLabels(labels: string[] | undefined): Record<string, string> {
  const parsed: Record<string, string> = {};
  for (const label of labels ?? []) {
    const match = /^([a-zA-Z0-9_.-]+)=(.*)$/.exec(label);
    if (!match) throw new ConfigError(`--label must be key=value, got ${label}`);
    parsed[match[1]!] = match[2]!;
  }
  return parsed;
}

export function resolveConfig(flags: RawFlags, env: NodeJS.ProcessEnv = process.env): PlatformConfig {
  const chosenRoles = flags.role ? parseRoles(flags.role) : [...upRoles];
  const port = integer('--port', flags.port, 1, 65535);
  if (port !== undefined && chosenRoles.length > 1) throw new ConfigError('--port needs a single --role; to move several roles, name each: --ports orchestrator=9100,gateway=8088');
  const ports = rolePorts(flags.ports ?? (env.PLATFORM_PORTS || undefined), chosenRoles);
  const host = flags.host ?? (env.PLATFORM_HOST || undefined) ?? '127.0.0.1';
  const [advertiseHost, advertisePortText] = (flags.advertise ?? env.PLATFORM_ADVERTISE ?? '').split(/:(?=\d+$)/);
  const network = flags.network ?? 'bridge';
  if (network !== 'bridge' && network !== 'host') throw new ConfigError(`--network must be bridge or host, got ${network}`);
  const machineId = flags.machineId ?? defaultMachineId();
  if (!new RegExp(machineIdPattern).test(machineId)) throw new ConfigError(`--machine-id must be 1-128 letters, digits, "_", "." or "-", got ${machineId}`);
  const domain = domainName('--domain', flags.domain ?? env.PLATFORM_DOMAIN ?? 'platform.local');
  return {
    roles: chosenRoles,
    host,
    ...(port === undefined ? {} : { port }),
    ports,
    advertiseHost: advertiseHost || (host === '0.0.0.0' || host === '::' ? hostname() : host),
    ...(advertisePortText ? { advertisePort: integer('--advertise port', advertisePortText, 1, 65535) } : {}),
    ...resolveEtcd(flags, env),
    dataDir: resolve(flags.dataDir ?? env.PLATFORM_DATA_DIR ?? '.platform-data'),
    domain,
    announceTtlSeconds: integer('--announce-ttl', flags.announceTtl ?? (env.PLATFORM_ANNOUNCE_TTL || undefined), 2, 600) ?? 10,
    metricsIntervalSeconds: integer('--metrics-interval', flags.metricsInterval ?? (env.PLATFORM_METRICS_INTERVAL || undefined), 1, 60) ?? 10,
    announce: flags.announce !== false && switchSetting('PLATFORM_ANNOUNCE', env.PLATFORM_ANNOUNCE, true),
    logLevel: flags.logLevel ?? env.PLATFORM_LOG_LEVEL ?? 'info',
    logFormat: logFormat(flags.logFormat ?? (env.PLATFORM_LOG_FORMAT || undefined)),
    auth: authMode(flags.auth ?? (env.PLATFORM_AUTH || undefined) ?? 'auto'),
    corsOrigins: corsOrigins(flags.corsOrigin ?? env.PLATFORM_CORS_ORIGIN ?? ''),
    allowedHosts: parseAllowedHosts(flags.allowedHost ?? env.PLATFORM_ALLOWED_HOSTS ?? '', (message) => new ConfigError(message)),
    allowedNotificationDestinations: allowList(
      '--allowed-notification-destination',
      flags.allowedNotificationDestination,
      env.PLATFORM_ALLOWED_NOTIFICATION_DESTINATIONS,
    ),
    agent: {
      machineId,
      network,
      ...(env.DOCKER_HOST ? { dockerHost: env.DOCKER_HOST } : {}),
      unitHost: flags.unitHost ?? (env.PLATFORM_UNIT_HOST || undefined) ?? '127.0.0.1',
      stopGraceSeconds: integer('--stop-grace', flags.stopGrace, 0, 3600) ?? 10,
      drainSeconds: integer('--drain-seconds', flags.drainSeconds, 0, 600) ?? 2,
      labels: parseLabels(flags.label),
      unitLogs: {
        maxSize: logMaxSize(flags.logMaxSize ?? (env.PLATFORM_LOG_MAX_SIZE || undefined)),
        maxFiles: integer('--log-max-files', flags.logMaxFiles ?? (env.PLATFORM_LOG_MAX_FILES || undefined), 1, 100) ?? defaultUnitLogs.maxFiles,
      },
      maxUnits: integer('--max-units', flags.maxUnits ?? (env.PLATFORM_MAX_UNITS || undefined), 1, MAX_UNITS_LIMIT) ?? defaultMaxUnits,
      ...resolveAgentResources(flags),
      hostNetworkUser: hostNetworkUser(flags.hostNetworkUser ?? (env.PLATFORM_HOST_NETWORK_USER || undefined) ?? defaultHostNetworkUser),
      defaultMemoryLimitMB:
        integer('--default-memory-limit', flags.defaultMemoryLimit ?? (env.PLATFORM_DEFAULT_MEMORY_LIMIT || undefined), 0, 1_073_741_824) ?? defaultMemoryLimitMB,
    },
    scheduler: {
      insecureRegistries: flags.insecureRegistry ?? [],
      allowedRegistries: allowList('--allowed-registry', flags.allowedRegistry, env.PLATFORM_ALLOWED_REGISTRIES),
      webhooks: resolveWebhookSecrets(flags, env),
      retention: {
        deploymentsPerService: integer('--keep-deployments', flags.keepDeployments, 1, 100_000) ?? defaultRetention.deploymentsPerService,
        journalEntries: integer('--keep-journal', flags.keepJournal, 1, 10_000_000) ?? defaultRetention.journalEntries,
        releasesPerService: integer('--keep-releases', flags.keepReleases, 1, 100_000) ?? defaultRetention.releasesPerService,
      },
      notify: resolveNotify(flags),
      engineGraceSeconds: integer('--engine-grace', flags.engineGrace ?? (env.PLATFORM_ENGINE_GRACE || undefined), 1, 86_400) ?? defaultEngineGraceSeconds,
      machineGraceMs: machineGrace(flags.machineGrace ?? (env.PLATFORM_MACHINE_GRACE || undefined)),
      ...resolveBackupSchedule(flags, env),
      backupDir: resolve(flags.backupDir ?? (env.PLATFORM_BACKUP_DIR || undefined) ?? join(flags.dataDir ?? env.PLATFORM_DATA_DIR ?? '.platform-data', 'backups')),
    },
    gateway: resolveGatewayConfig(flags, env, domain),
    http: resolveHttpLimits(flags),
    peers: {
      ...(flags.directoryUrl ? { directoryUrl: flags.directoryUrl } : {}),
      ...(flags.schedulerUrl ? { schedulerUrl: flags.schedulerUrl } : {}),
      ...(flags.orchestratorUrl ? { orchestratorUrl: flags.orchestratorUrl } : {}),
    },
    writeBudget: {
      bytes: byteSize('--write-budget', flags.writeBudget ?? (env.PLATFORM_WRITE_BUDGET || undefined), 64 * 1024) ?? DEFAULT_WRITE_BUDGET.bytes,
      windowMs: duration('--write-budget-window', flags.writeBudgetWindow ?? (env.PLATFORM_WRITE_BUDGET_WINDOW || undefined)) ?? DEFAULT_WRITE_BUDGET.windowMs,
    },
    storeSpaceLimitBytes:
      byteSize('--store-space-limit', flags.storeSpaceLimit ?? (env.PLATFORM_STORE_SPACE_LIMIT || undefined), 1024 ** 2) ?? DEFAULT_STORE_SPACE_LIMIT_BYTES,
    // The bounds of a declaration's resources.memoryMB.
    defaultUnitMemoryMB: integer('--default-unit-memory', flags.defaultUnitMemory ?? (env.PLATFORM_DEFAULT_UNIT_MEMORY || undefined), 6, 1_048_576),
  };
}

export type EtcdFlags = Pick<RawFlags, 'etcd' | 'etcdCa' | 'etcdCert' | 'etcdKey' | 'etcdUser' | 'etcdPassword' | 'etcdPasswordFile'>;

type Setting = (flag: string | undefined, name: string) => string | undefined;

/** etcd's URLs and how to reach it securely, from `--etcd*` flags or `PLATFORM_ETCD*` variables (empty ones count as unset). */
export function resolveEtcd(flags: EtcdFlags, env: NodeJS.ProcessEnv): { etcd?: string[]; etcdSecurity: EtcdSecurity } {
  const setting: Setting = (flag, name) => flag || env[name] || undefined;
  const urls = (setting(flags.etcd, 'PLATFORM_ETCD') ?? '').split(',').map((url) => url.trim()).filter(Boolean);
  const pem = (flag: string, value: string | undefined, name: string): Buffer | undefined => {
    const path = setting(value, name);
    return path === undefined ? undefined : readFileFor(flag, path);
  };
  const ca = pem('--etcd-ca', flags.etcdCa, 'PLATFORM_ETCD_CA');
  const cert = pem('--etcd-cert', flags.etcdCert, 'PLATFORM_ETCD_CERT');
  const key = pem('--etcd-key', flags.etcdKey, 'PLATFORM_ETCD_KEY');
  if (Boolean(cert) !== Boolean(key)) throw new ConfigError('--etcd-cert and --etcd-key go together: the client certificate and its private key');
  const user = etcdUser(flags, env, setting);
  if ((ca || cert || user) && urls.length === 0) throw new ConfigError('--etcd-ca, --etcd-cert, --etcd-key and --etcd-user need --etcd (or PLATFORM_ETCD)');
  const plain = urls.find((url) => !url.startsWith('https://'));
  if ((ca || cert) && plain) throw new ConfigError(`--etcd-ca, --etcd-cert and --etcd-key need https:// etcd URLs, got ${plain}`);
  return {
    ...(urls.length > 0 ? { etcd: urls } : {}),
    etcdSecurity: { ...(ca ? { ca } : {}), ...(cert && key ? { cert, key } : {}), ...(user ? { user } : {}) },
  };
}

/** The password comes from --etcd-password, else the password file, else PLATFORM_ETCD_PASSWORD; no message ever shows it. */
function etcdUser(flags: EtcdFlags, env: NodeJS.ProcessEnv, setting: Setting): EtcdSecurity['user'] {
  if (flags.etcdPassword && flags.etcdPasswordFile) throw new ConfigError('give --etcd-password or --etcd-password-file, not both');
  const name = setting(flags.etcdUser, 'PLATFORM_ETCD_USER');
  const file = setting(flags.etcdPasswordFile, 'PLATFORM_ETCD_PASSWORD_FILE');
  const password = flags.etcdPassword || (file === undefined ? undefined : passwordFromFile(file)) || env.PLATFORM_ETCD_PASSWORD || undefined;
  if (name === undefined && password === undefined) return undefined;
  if (name === undefined) throw new ConfigError('an etcd password needs --etcd-user (or PLATFORM_ETCD_USER)');
  if (password === undefined) throw new ConfigError('--etcd-user needs a password: PLATFORM_ETCD_PASSWORD, --etcd-password-file or --etcd-password');
  return { name, password };
}

function passwordFromFile(path: string): string {
  const password = readFileFor('--etcd-password-file', path).toString('utf8').replace(/\r?\n$/, '');
  if (password === '') throw new ConfigError(`--etcd-password-file: ${path} holds an empty password`);
  return password;
}

function readFileFor(flag: string, path: string): Buffer {
  let content: Buffer;
  try {
    content = readFileSync(path);
  } catch (error) {
    throw new ConfigError(`${flag}: cannot read ${path}: ${error instanceof Error ? error.message : String(error)}`);
  }
  if (content.length === 0) throw new ConfigError(`${flag}: ${path} is empty`);
  return content;
}

/**
 * An allow-list of destinations on special addresses (--allowed-registry, --allowed-notification-destination;
 * repeatable, or comma-separated), else its environment variable; checked here so a typo stops the start.
 */
function allowList(flag: string, flags: string[] | undefined, envText: string | undefined): string[] {
  const entries = (flags && flags.length > 0 ? flags : [envText ?? ''])
    .flatMap((text) => text.split(','))
    .map((entry) => entry.trim())
    .filter(Boolean);
  try {
    new RegistryAllowList(entries, flag);
  } catch (error) {
    throw new ConfigError((error as Error).message);
  }
  return entries;
}

/** An on/off variable: true/false, yes/no, 1/0 or on/off; empty or unset is the default. */
function switchSetting(name: string, text: string | undefined, fallback: boolean): boolean {
  const value = (text ?? '').trim().toLowerCase();
  if (value === '') return fallback;
  if (['true', 'yes', '1', 'on'].includes(value)) return true;
  if (['false', 'no', '0', 'off'].includes(value)) return false;
  throw new ConfigError(`${name} must be true or false, got ${text}`);
}

function authMode(text: string): AuthMode {
  if (!(authModes as readonly string[]).includes(text)) throw new ConfigError(`--auth must be auto, token or none, got ${text}`);
  return text as AuthMode;
}

/** `https://ops.example.com,http://localhost:3000` → each as the browser's Origin header spells it. */
function corsOrigins(text: string): string[] {
  return text
    .split(',')
    .map((origin) => origin.trim())
    .filter(Boolean)
    .map((origin) => {
      let url: URL | undefined;
      try {
        url = new URL(origin);
      } catch {
        // reported below
      }
      if (!url || !/^https?:$/.test(url.protocol) || url.origin !== origin.replace(/\/$/, '')) {
        throw new ConfigError(`--cors-origin takes origins such as https://ops.example.com (scheme, host and port only), got ${origin}`);
      }
      return url.origin;
    });
}

function domainName(flag: string, text: string): string {
  const domain = text.trim().toLowerCase().replace(/\.$/, '');
  if (!/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/.test(domain)) {
    throw new ConfigError(`${flag} must be a DNS name such as platform.local, got ${text}`);
  }
  return domain;
}

function resolveGatewayConfig(flags: RawFlags, env: NodeJS.ProcessEnv, domain: string): GatewayConfig {
  const internalDomain = domainName('--internal-domain', flags.internalDomain ?? env.PLATFORM_INTERNAL_DOMAIN ?? 'platform.internal');
  if (internalDomain === domain) throw new ConfigError(`--internal-domain must differ from --domain (both are ${domain})`);
  return {
    internalDomain,
    exposeComponents: flags.exposeComponents ?? false,
    requestTimeoutSeconds: integer('--request-timeout', flags.requestTimeout, 1, 3600) ?? 60,
    idleTimeoutSeconds: integer('--idle-timeout', flags.idleTimeout, 1, 3600) ?? 60,
    maxHeaderSize: integer('--max-header-size', flags.maxHeaderSize, 1024, 1024 * 1024) ?? 16 * 1024,
    upstreamConnections: integer('--upstream-connections', flags.upstreamConnections, 1, 10_000) ?? 128,
    dataPlane: dataPlaneChoice(flags.dataPlane ?? (env.PLATFORM_GATEWAY_DATA_PLANE || undefined) ?? 'auto'),
    ...haproxyBin(flags.haproxyBin ?? (env.PLATFORM_HAPROXY_BIN || undefined)),
    internalHost: flags.internalHost ?? (env.PLATFORM_GATEWAY_INTERNAL_HOST || undefined) ?? '127.0.0.1',
    ...internalPort(integer('--internal-port', flags.internalPort ?? (env.PLATFORM_GATEWAY_INTERNAL_PORT || undefined), 1, 65535)),
    tls: resolveGatewayTls(flags, env),
  };
}

function resolveGatewayTls(flags: RawFlags, env: NodeJS.ProcessEnv): GatewayTlsConfig {
  const portText = flags.httpsPort ?? (env.PLATFORM_HTTPS_PORT || undefined);
  const httpsPort = portText === 'off' ? undefined : (integer('--https-port', portText, 0, 65_535) ?? 8443);
  const email = flags.acmeEmail ?? (env.PLATFORM_ACME_EMAIL || undefined);
  const directory = flags.acmeDirectory ?? (env.PLATFORM_ACME_DIRECTORY || undefined);
  if (email === undefined && (directory !== undefined || flags.acmeCaFile !== undefined)) {
    throw new ConfigError('--acme-directory and --acme-ca-file need --acme-email: ACME is turned on by naming its contact');
  }
  if (email !== undefined && !/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(email)) throw new ConfigError(`--acme-email must be an email address, got ${email}`);
  if (flags.httpsRedirect && httpsPort === undefined) throw new ConfigError('--https-redirect needs the HTTPS listener (--https-port is off)');
  if (email !== undefined && httpsPort === undefined) throw new ConfigError('--acme-email needs the HTTPS listener (--https-port is off)');
  if (directory !== undefined && !/^https?:\/\//.test(directory)) throw new ConfigError(`--acme-directory must be an http(s) URL, got ${directory}`);
  return {
    httpsPort,
    httpsRedirect: flags.httpsRedirect ?? false,
    hstsMaxAgeSeconds: integer('--hsts-max-age', flags.hstsMaxAge, 0, 2 * 365 * 86_400),
    acme: email === undefined ? undefined : { email, directoryUrl: directory ?? LETS_ENCRYPT_DIRECTORY, caFile: flags.acmeCaFile ? resolve(flags.acmeCaFile) : undefined },
  };
}

function dataPlaneChoice(text: string): DataPlaneChoice {
  if (!(dataPlaneChoices as readonly string[]).includes(text)) throw new ConfigError(`--data-plane must be auto, haproxy or node, got ${text}`);
  return text as DataPlaneChoice;
}

const internalPort = (port: number | undefined): { internalPort?: number } => (port === undefined ? {} : { internalPort: port });

const haproxyBin = (path: string | undefined): { haproxyBin?: string } => (path === undefined ? {} : { haproxyBin: path });

function resolveHttpLimits(flags: RawFlags): HttpLimitsConfig {
  const headersTimeoutSeconds = integer('--headers-timeout', flags.headersTimeout, 1, 3600) ?? 10;
  const bodyTimeoutSeconds = integer('--body-timeout', flags.bodyTimeout, 1, 86_400);
  if (bodyTimeoutSeconds !== undefined && bodyTimeoutSeconds < headersTimeoutSeconds) {
    throw new ConfigError(`--body-timeout (${bodyTimeoutSeconds}) must be at least --headers-timeout (${headersTimeoutSeconds}): it covers the head too`);
  }
  return {
    headersTimeoutSeconds,
    ...(bodyTimeoutSeconds === undefined ? {} : { bodyTimeoutSeconds }),
    maxConnections: integer('--max-connections', flags.maxConnections, 1, 1_000_000) ?? 2048,
    maxConnectionsPerAddress: integer('--max-connections-per-address', flags.maxConnectionsPerAddress, 1, 1_000_000) ?? 256,
  };
}

/** A webhook secret's least length: with 20 guesses a minute (src/auth/failure-limiter.ts) even a guessable alphabet takes ages. */
export const MIN_WEBHOOK_SECRET_LENGTH = 24;

/** Empty values count as unset, so `PLATFORM_…=` in a unit file does not enable a hook with an empty secret. */
function resolveWebhookSecrets(flags: RawFlags, env: NodeJS.ProcessEnv): WebhookSecrets {
  const secret = (flag: string | undefined, name: string, option: string) => {
    const value = flag || env[name] || undefined;
    if (value !== undefined && value.length < MIN_WEBHOOK_SECRET_LENGTH) {
      throw new ConfigError(`${name} (or ${option}) must be at least ${MIN_WEBHOOK_SECRET_LENGTH} characters, got ${value.length}: make one with openssl rand -hex 16`);
    }
    return value;
  };
  const registryToken = secret(flags.registryWebhookToken, 'PLATFORM_REGISTRY_WEBHOOK_TOKEN', '--registry-webhook-token');
  const dockerHubToken = secret(flags.dockerhubWebhookToken, 'PLATFORM_DOCKERHUB_WEBHOOK_TOKEN', '--dockerhub-webhook-token');
  const gitHubSecret = secret(flags.githubWebhookSecret, 'PLATFORM_GITHUB_WEBHOOK_SECRET', '--github-webhook-secret');
  return { ...(registryToken ? { registryToken } : {}), ...(dockerHubToken ? { dockerHubToken } : {}), ...(gitHubSecret ? { gitHubSecret } : {}) };
}

export const portOf = (config: Pick<PlatformConfig, 'port' | 'ports'>, role: Role): number => config.port ?? config.ports[role] ?? defaultPorts[role];

function hostNetworkUser(text: string): string {
  if (!/^[0-9]{1,10}(:[0-9]{1,10})?$/.test(text)) throw new ConfigError(`--host-network-user must be a numeric uid or uid:gid (e.g. 65534:65534), got ${text}`);
  return text;
}

/** Every port this process's roles listen on (a gateway's internal and HTTPS listeners too): no unit may take one. */
export function listenedPorts(config: PlatformConfig): number[] {
  const ports = config.roles.map((role) => portOf(config, role));
  if (config.roles.includes('gateway')) {
    ports.push(config.gateway.internalPort ?? portOf(config, 'gateway') + 1);
    if (config.gateway.tls.httpsPort) ports.push(config.gateway.tls.httpsPort);
  }
  return [...new Set(ports)].sort((a, b) => a - b);
}
