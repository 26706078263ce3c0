import type { Logger } from 'pino';
import { createLogger } from '../logger.js';
import type { FastifyBaseLogger } from 'fastify';
import { announcedAs, ConfigError, portOf, type PlatformConfig, type Role } from '../config.js';
import { openStore } from '../store/open-store.js';
import { LeasedKeys } from '../store/leased-keys.js';
import { announcementEntry } from '../store/records/announcements.js';
import { readStoreSchema, refuseNewerSchema } from '../store/store-schema.js';
import { STORE_SCHEMA_VERSION } from '../store/schema-version.js';
import { platformVersion } from '../platform-version.js';
import { componentVersionEntry } from '../store/records/component-versions.js';
import { StoreUnavailableError, type Store } from '../store/store.js';
import { etcdWaitPauseMs } from '../store/etcd-access.js';
import { setTimeout as sleep } from 'node:timers/promises';
import { TokenCache } from '../auth/token-cache.js';
import { isLoopback } from '../auth/caller.js';
import { FailureLimiter } from '../auth/failure-limiter.js';
import { loadSessionKey } from '../auth/session-key.js';
import { relayKeyOf } from '../auth/relayed-caller.js';
import { EndedSessions } from '../auth/ended-sessions.js';
import { HostRule } from '../http/host-rule.js';
import { StoreSpace } from '../store/store-space.js';
import { WriteBudget } from '../auth/write-budget.js';
import type { RoleContext, StartedRole, StopReason } from './role.js';

// Starts the chosen roles in this process: one store connection, one server per role, and one
// lease under which every announcement of the process is written.

// Each role's modules are loaded only by a process that runs it: a role's dependencies (the
// agent's Docker client, the gateway's ACME client and certificate parser, the scheduler's
// webhooks, the dashboard's assets) cost every other role's process their memory (issue 29: an
// agent at 150 MiB idle, of which some 40 MiB were the other roles' code).
const starters: Record<Role, (context: RoleContext) => Promise<StartedRole>> = {
  directory: async (context) => (await import('./directory/start.js')).startDirectory(context),
  scheduler: async (context) => (await import('./scheduler/start.js')).startScheduler(context),
  orchestrator: async (context) => (await import('./orchestrator/start.js')).startOrchestrator(context),
  agent: async (context) => (await import('./agent/start.js')).startAgentRole(context),
  gateway: async (context) => (await import('./gateway/start.js')).startGateway(context),
  web: async (context) => (await import('./web/start.js')).startWeb(context),
};

export interface RunningRole {
  role: Role;
  url: string;
}

export interface RunningPlatform {
  store: Store;
  roles: RunningRole[];
  close(reason?: StopReason): Promise<void>;
}

type Closer = (reason: StopReason) => Promise<void>;

/**
 * How long the roles' start waits for an etcd that does not answer yet (src/store/open-store.ts).
 * After a reboot of every machine etcd's members come up with the roles, and on two loaded cores a
 * quorum took more than the 1.5 s of a call's deadline: roles that exited then were restarted by
 * systemd over and over, thirty Node starts queued, and the cluster was not back within 60 s
 * (issue 30). Past this the start goes on and fails "unreachable", and systemd starts it again.
 */
export const ROLE_START_ETCD_WAIT_MS = 120_000;

export interface LaunchOptions {
  logger?: Logger;
  /** Ends a start still waiting for the store (a stop signal meanwhile): launchRoles throws its reason. */
  signal?: AbortSignal;
}

export async function launchRoles(config: PlatformConfig, options: LaunchOptions = {}): Promise<RunningPlatform> {
  const log = options.logger ?? createLogger(config);
  const startedAt = Date.now();
  const store = await openStore({
    ...(config.etcd ? { etcd: config.etcd } : {}),
    etcdSecurity: config.etcdSecurity,
    dataDir: config.dataDir,
    warn: (message) => log.warn(message),
    waitForEtcdMs: ROLE_START_ETCD_WAIT_MS,
    ...(options.signal ? { signal: options.signal } : {}),
  });
  // etcd answered, but a read of the start may still miss its deadline: a member that just took
  // the lead, a machine whose thirty Node processes start at once. Exiting then had systemd start
  // the process again 2 s later, paying Node's start again on cores already short of it (a
  // gateway's start missed its deadline over and over under load, ci17): the start is tried again
  // in this process instead, after what it had started is closed as for a restart.
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await startRoles(config, store, log);
    } catch (error) {
      const again = error instanceof StoreUnavailableError && !options.signal?.aborted && Date.now() - startedAt < ROLE_START_ETCD_WAIT_MS;
      if (again) {
        const pauseMs = etcdWaitPauseMs(attempt);
        log.warn({ reason: error.message, attempt, pauseMs }, 'the store missed a deadline while the roles started; starting them again in this process');
        const paused = await sleep(pauseMs, true, options.signal ? { signal: options.signal } : {}).catch(() => false);
        if (paused) continue;
      }
      await store.close();
      throw options.signal?.aborted ? options.signal.reason : error;
    }
  }
}

/** Starts the roles on an open store; on a failure, closes what it started (not the store) and throws. */
async function startRoles(config: PlatformConfig, store: Store, log: Logger): Promise<RunningPlatform> {
  await checkStoreSchema(store, log);
  const announcements = await LeasedKeys.start(store, config.announceTtlSeconds, log);
  const closers: Closer[] = [];
  const running: RunningRole[] = [];
  try {
    const tokens = config.auth === 'none' ? undefined : await TokenCache.start(store);
    if (tokens) closers.unshift(() => tokens.close());
    // One limiter per process: an address refused by one role is refused by the others it serves.
    const sessionKey = tokens ? await loadSessionKey(store) : undefined;
    const endedSessions = tokens ? await EndedSessions.start(store) : undefined;
    if (endedSessions) closers.unshift(() => endedSessions.close());
    const access = {
      mode: config.auth,
      listenerLoopback: isLoopback(config.host),
      failures: new FailureLimiter(),
      corsOrigins: config.corsOrigins,
      hosts: new HostRule({
        listenHost: config.host,
        advertiseHost: config.advertiseHost,
        allowed: config.allowedHosts,
        domains: { domain: config.domain, internalDomain: config.gateway.internalDomain },
      }),
      ...(tokens ? { tokens } : {}),
      ...(sessionKey ? { sessionKey, relayKey: relayKeyOf(sessionKey) } : {}),
      ...(endedSessions ? { endedSessions } : {}),
    };
    const storeSpace = new StoreSpace(store, config.storeSpaceLimitBytes);
    closers.unshift(async () => storeSpace.close());
    const writeBudget = new WriteBudget(config.writeBudget);
    for (const role of config.roles) {
      const port = portOf(config, role);
      const advertised = `${config.advertiseHost}:${config.advertisePort ?? port}`;
      const started = await starters[role]({ config, store, log: log.child({ role }) as unknown as FastifyBaseLogger, advertised, access, storeSpace, writeBudget });
      closers.unshift((reason) => started.close(reason));
      await started.listen(config.host, port).catch((error: unknown) => {
        throw (error as NodeJS.ErrnoException).code === 'EADDRINUSE' ? portInUse(config, role, (error as { port?: number }).port ?? port) : error;
      });
      await started.start?.();
      const component = announcedAs[role];
      if (component && config.announce && !started.selfAnnounced) {
        const announcement = announcementEntry(component, advertised);
        await announcements.set(announcement.key, announcement.value);
      }
      // Every role, announced or not (agents, followers, roles behind a sidekick): what `platform version` lists.
      const versionRecord = componentVersionEntry({
        role,
        machine: config.agent.machineId,
        address: advertised,
        version: platformVersion,
        startedAt: new Date().toISOString(),
        // Whether any gateway orders certificates: the service page says why none will come when none does.
        ...(role === 'gateway' ? { acme: config.gateway.tls.acme !== undefined } : {}),
      });
      await announcements.set(versionRecord.key, versionRecord.value);
      running.push({ role, url: `http://${config.host === '0.0.0.0' ? config.advertiseHost : config.host}:${port}` });
    }
  } catch (error) {
    // As a restart: the next start (launchRoles' next attempt in this process, or the process
    // systemd starts again) adopts what this one took over. A gateway that stopped the HAProxy it
    // had adopted left its ports refusing connections until then: an upgrade's restart whose start
    // missed a store deadline refused requests (issue 30).
    await closeAll([...closers, () => announcements.close()], 'restart');
    throw error;
  }
  return {
    store,
    roles: running,
    // Announcements go first (the lease is revoked, so peers stop finding us at once), then the servers.
    close: (reason = 'stop') => closeAll([() => announcements.close(), ...closers, () => store.close()], reason),
  };
}

/**
 * Before any role reads a record: a store of a newer layout than this program knows is refused
 * (the message names both versions); an older one is read as it is (each release reads the layout
 * before its own, docs/upgrades.md) until the scheduler leader migrates it.
 */
async function checkStoreSchema(store: Store, log: Logger): Promise<void> {
  const { version } = await readStoreSchema(store);
  refuseNewerSchema(version, store.description, platformVersion);
  if (version < STORE_SCHEMA_VERSION) log.info({ storeSchema: version, programSchema: STORE_SCHEMA_VERSION }, 'the store schema is older than this program\'s: the scheduler leader migrates it');
}

/** What to do when a role's port is taken: the role, the port, and the flag that moves it. */
function portInUse(config: PlatformConfig, role: Role, port: number): ConfigError {
  const address = `${config.host}:${port}`;
  const flag =
    role === 'gateway' && port === config.gateway.tls.httpsPort ? '--https-port <port> (or off)'
    : role === 'gateway' && port !== portOf(config, 'gateway') ? '--internal-port <port>'
    : config.roles.length > 1 ? `--ports ${role}=<port>`
    : '--port <port>';
  return new ConfigError(`the ${role} cannot listen on ${address}: another process listens there (another platform?). Stop it, or move the ${role} with ${flag}`);
}

async function closeAll(closers: Closer[], reason: StopReason): Promise<void> {
  for (const close of closers) {
    await close(reason).catch(() => undefined);
  }
}
