import { pino, type Logger } from 'pino';
import type { FastifyBaseLogger } from 'fastify';
import { announcedAs, portOf, type PlatformConfig, type Role } from '../config.js';
import { createRoleServer, type RoleServer } from '../http/server.js';
import { PeerClient } from '../http/peer-client.js';
import { openStore } from '../store/open-store.js';
import { LeasedKeys } from '../store/leased-keys.js';
import { componentKey, servicePrefix } from '../store/keys.js';
import { PrefixCache } from '../store/prefix-cache.js';
import type { Store } from '../store/store.js';
import { directoryRoutes } from './directory/routes.js';
import { Scheduler } from './scheduler/scheduler.js';
import { schedulerRoutes } from './scheduler/routes.js';
import { orchestratorRoutes } from './orchestrator/routes.js';
import { startAgent } from './agent/agent.js';

// Starts the chosen roles in this process: one store connection, one Fastify server per role,
// and one lease under which every announcement of the process is written.

export interface RunningRole {
  role: Role;
  url: string;
}

export interface RunningPlatform {
  store: Store;
  roles: RunningRole[];
  close(): Promise<void>;
}

type Closer = () => Promise<void>;

export async function launchRoles(config: PlatformConfig, logger?: Logger): Promise<RunningPlatform> {
  const log = logger ?? pino({ level: config.logLevel });
  const store = await openStore({ ...(config.etcd ? { etcd: config.etcd } : {}), dataDir: config.dataDir });
  const announcements = await LeasedKeys.start(store, config.announceTtlSeconds, log);
  const closers: Closer[] = [];
  const running: RunningRole[] = [];
  try {
    for (const role of config.roles) {
      const roleLog = log.child({ role }) as unknown as FastifyBaseLogger;
      const port = portOf(config, role);
      const advertised = `${config.advertiseHost}:${config.advertisePort ?? port}`;
      const started = await startRole(role, { config, store, log: roleLog, advertised });
      closers.unshift(started.close);
      await started.server.listen({ host: config.host, port });
      closers.unshift(() => started.server.close());
      if (role !== 'agent') await announcements.set(componentKey(announcedAs[role]), advertised);
      running.push({ role, url: `http://${config.host === '0.0.0.0' ? config.advertiseHost : config.host}:${port}` });
    }
  } catch (error) {
    await closeAll([...closers, () => announcements.close(), () => store.close()]);
    throw error;
  }
  return {
    store,
    roles: running,
    // Announcements go first (the lease is revoked, so peers stop finding us at once), then the servers.
    close: () => closeAll([() => announcements.close(), ...closers, () => store.close()]),
  };
}

async function closeAll(closers: Closer[]): Promise<void> {
  for (const close of closers) {
    await close().catch(() => undefined);
  }
}

interface RoleContext {
  config: PlatformConfig;
  store: Store;
  log: FastifyBaseLogger;
  advertised: string;
}

interface StartedRole {
  server: RoleServer;
  close: Closer;
}

async function startRole(role: Role, context: RoleContext): Promise<StartedRole> {
  const { config, store, log } = context;
  const storeReady = async () => {
    await store.ping();
    return { store: store.description };
  };
  switch (role) {
    case 'directory': {
      const server = await createRoleServer({ role, logger: log, readiness: storeReady });
      const services = await PrefixCache.start(store, servicePrefix);
      directoryRoutes(server, store, services);
      return { server, close: () => services.close() };
    }
    case 'scheduler': {
      const server = await createRoleServer({ role, logger: log, readiness: storeReady });
      const scheduler = new Scheduler({
        store,
        log,
        progressDeadlineSeconds: config.scheduler.progressDeadlineSeconds,
        registry: { insecureRegistries: config.scheduler.insecureRegistries },
      });
      schedulerRoutes(server, scheduler);
      await scheduler.start();
      return { server, close: () => scheduler.close() };
    }
    case 'orchestrator': {
      const peers = {
        directory: new PeerClient(store, 'service-directory', config.peers.directoryUrl),
        scheduler: new PeerClient(store, 'scheduler', config.peers.schedulerUrl),
      };
      const server = await createRoleServer({
        role,
        logger: log,
        readiness: async () => {
          await store.ping();
          await Promise.all([peers.directory.call('GET', '/healthz'), peers.scheduler.call('GET', '/healthz')]);
          return { store: store.description, peers: { 'service-directory': 'ok', scheduler: 'ok' } };
        },
      });
      orchestratorRoutes(server, store, peers);
      return { server, close: async () => undefined };
    }
    case 'agent': {
      let readiness: () => Promise<Record<string, unknown>> = storeReady;
      const server = await createRoleServer({ role, logger: log, readiness: () => readiness() });
      const agent = await startAgent({
        store,
        server,
        log,
        machineId: config.agent.machineId,
        address: context.advertised,
        unitHost: config.agent.unitHost,
        network: config.agent.network,
        ...(config.agent.dockerHost ? { dockerHost: config.agent.dockerHost } : {}),
        labels: config.agent.labels,
        leaseTtlSeconds: config.announceTtlSeconds,
        stopGraceSeconds: config.agent.stopGraceSeconds,
      });
      readiness = () => agent.readiness();
      return { server, close: () => agent.close() };
    }
  }
}
