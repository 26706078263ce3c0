import { createServer, type AddressInfo } from 'node:net';
import { mkdirSync, rmSync } from 'node:fs';
import { writeFileAtomically } from '../../atomic-file.js';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyBaseLogger } from 'fastify';
import type { PlatformConfig } from '../../config.js';
import type { DataPlane } from './data-plane.js';
import type { StopReason } from '../role.js';
import type { NodeDataPlane } from './node-data-plane.js';
import type { PlannedRoute } from './route-plan.js';
import type { RouteView } from './route-table.js';
import {
  connectionHeadersLua,
  haproxyConfig,
  hostsMapFile,
  poolBackendOf,
  routeLabel,
  routesMapFile,
  slotName,
  threadCommands,
  threadShare,
  unitsMapFile,
  type BackendConfig,
  type HaproxyFiles,
  type HaproxySettings,
  type Listener as ConfigListener,
} from './haproxy-config.js';
import type { GatewayListeners } from './listener-policy.js';
import { backendConfigs, emptyState, reassignsBackend, reloaded, routedBackends, transition, type HaproxyState } from './haproxy-slots.js';
import { HaproxyTrafficLog, TRAFFIC_LOG_SAMPLE_EVERY } from './haproxy-traffic-log.js';
import { COUNTERS_COMMAND, HaproxyTrafficCounters } from './haproxy-traffic-counters.js';
import { haproxyCounted } from './gateway-metrics.js';
import { HaproxyProcess } from './haproxy-process.js';
import { takeHandover, writeHandover } from './haproxy-handover.js';
import { runtimeCommand, runtimeCommands, serverStats } from './haproxy-runtime.js';
import { followHaproxy } from './haproxy-metrics.js';
import { HaproxyCertificates } from './haproxy-certificates.js';
import type { CertificateSet } from '../../certificates/certificate-set.js';
import type { PublicHosts } from './tls/public-hosts.js';
import { WorkQueue } from '../../work-queue.js';

/** With --https-port: HAProxy terminates TLS for the public hosts with the stored certificates. */
export interface HaproxyTls {
  port: number;
  certificates: CertificateSet;
  hosts: PublicHosts;
  hstsMaxAgeSeconds: number | undefined;
  /** Called with the port HAProxy serves HTTPS on (port 0 asks for any free one). */
  opened(port: number): void;
}

/** A free TCP port on `host`, for `--https-port 0`: HAProxy binds only a port it is given. */
function freePortOn(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, host, () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

// The HAProxy data plane: HAProxy (a child process, haproxy-process.ts) listens on the gateway's
// address and forwards to units; the gateway applies each route plan through the Runtime API
// (haproxy-slots.ts decides the commands: a new route takes a spare backend of the pool, more
// units get dynamic servers), reloading only when the pool of spare backends runs dry. Requests
// HAProxy does not route (unknown hosts, the gateway's own endpoints) go to the Node data plane on
// a loopback port, which answers them exactly as it would on its own.
// Its files live in `<data-dir>/gateway-<port>/`.

/** How long a stopping gateway waits for an update of HAProxy in flight before leaving it without a handover. */
const SYNC_SETTLE_MS = 3_000;

/** Unix socket paths must fit in sun_path (108 bytes, with its terminating NUL). */
const MAX_SOCKET_PATH = 107;

export class HaproxyDataPlane implements DataPlane {
  readonly kind = 'haproxy' as const;
  private plan: readonly PlannedRoute[] = [];
  private state: HaproxyState = emptyState();
  /** What the running HAProxy holds: `state` once commands or a reload have taken effect. */
  private live: HaproxyState = emptyState();
  private process: HaproxyProcess | undefined;
  private files: HaproxyFiles | undefined;
  private configFile = '';
  /**
   * Updates of HAProxy to the latest plan, one at a time: plans arriving during an update are
   * applied, all at once, by one more update after it.
   */
  private readonly updates = new WorkQueue({
    run: () => this.update(),
    // HAProxy died or stalled: it is restarted from the state written then, and a restart syncs again.
    onError: (error) => this.log.warn({ reason: (error as Error).message }, 'haproxy runtime update failed'),
  });
  /** The data plane is closing: no more runtime commands, so what HAProxy holds stays `live`. */
  private closing = false;
  private handoverFile = '';
  private listeners: ConfigListener[] = [];
  private tlsHost = '';
  private tlsPort = 0;
  private certificates: HaproxyCertificates | undefined;
  private readonly trafficLog: HaproxyTrafficLog;
  private trafficLogPort = 0;
  private counters: HaproxyTrafficCounters | undefined;
  /** The HAProxy a previous gateway left serving was adopted as it was handed over: no new worker. */
  private adoptedAsHandedOver = false;

  constructor(
    private readonly node: NodeDataPlane,
    private readonly config: PlatformConfig,
    private readonly log: FastifyBaseLogger,
    private readonly tls?: HaproxyTls,
  ) {
    this.trafficLog = new HaproxyTrafficLog((route) => node.metricsOf(route), log);
  }

  apply(plan: readonly PlannedRoute[]): void {
    this.plan = plan;
    this.node.apply(plan);
    this.sync();
  }

  async listen(listeners: GatewayListeners): Promise<void> {
    const { port } = listeners.public;
    const dir = join(this.config.dataDir, `gateway-${port}`);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    this.handoverFile = join(dir, 'handover.json');
    const handover = takeHandover(this.handoverFile);
    // The port HAProxy's configuration names for the Node server, if a previous gateway left one running.
    await this.listenOwn(handover?.ownPort ?? 0, listeners.public.policy);
    this.trafficLogPort = await this.trafficLog.listen(handover?.trafficLogPort ?? 0);
    // Per-route 503 files of earlier versions: the answers now read the route from the routes map.
    rmSync(join(dir, 'errors'), { recursive: true, force: true });
    const files = haproxyFiles(dir);
    const masterSocket = join(dir, 'master.sock');
    if (masterSocket.length > MAX_SOCKET_PATH) throw new Error(`--data-dir is too long for HAProxy's sockets: ${masterSocket} has more than ${MAX_SOCKET_PATH} bytes`);
    this.files = files;
    this.configFile = join(dir, 'haproxy.cfg');
    this.listeners = [{ host: listeners.public.host, port, name: 'public' }, ...(listeners.internal ? [{ ...listeners.internal, name: 'internal' as const }] : [])];
    this.tlsHost = listeners.public.host;
    if (this.tls) {
      // --https-port 0: a free port, or the one the HAProxy handed over listens on (a new one would differ from its configuration and reload it).
      this.tlsPort = this.tls.port !== 0 ? this.tls.port : (handover?.tlsPort ?? (await freePortOn(this.tlsHost)));
      const certificates = new HaproxyCertificates(this.tls.certificates, this.tls.hosts, dir, this.log);
      this.certificates = certificates;
      certificates.follow(() => this.sync());
    }
    this.process = new HaproxyProcess({
      bin: this.config.gateway.haproxyBin ?? 'haproxy',
      configFile: this.configFile,
      masterSocket,
      runtimeSocket: files.runtimeSocket,
      pidFile: files.pidFile,
      log: this.log,
      prepare: () => this.writeFiles(),
      started: () => {
        this.live = this.state;
        this.certificates?.started();
      },
      restarted: () => this.sync(),
      tookOver: () => {
        if (handover === undefined || handover.ownPort !== this.node.port() || handover.fixedConfig !== this.configText([])) return false;
        this.state = handover.state;
        this.certificates?.takeOver(handover.certificates);
        this.adoptedAsHandedOver = true;
        return true;
      },
    });
    const process = this.process;
    followHaproxy({
      up: () => process.running,
      reloads: () => process.reloads,
      restarts: () => process.restarts,
      stat: () => this.stat(),
      route: (backend) => this.routeOf(backend),
    });
    await process.start();
    this.counters = new HaproxyTrafficCounters({
      intervalSeconds: this.config.metricsIntervalSeconds,
      read: () => runtimeCommand(files.runtimeSocket, COUNTERS_COMMAND),
      routeOf: (backend) => this.routeOf(backend),
      record: haproxyCounted,
      log: this.log,
    });
    // A reading handed over is of the same worker only when HAProxy was adopted as it was; else its worker counts from zero.
    this.counters.start(this.adoptedAsHandedOver ? handover?.counters : undefined, !this.adoptedAsHandedOver);
    if (this.tls) {
      this.tls.opened(this.tlsPort);
      this.log.info({ port: this.tlsPort }, 'HTTPS listener open (HAProxy)');
    }
    this.sync();
  }

  /** `show stat`, waiting out a reload (the runtime socket moves to the new worker) for up to a second. */
  private async stat(): Promise<string> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await runtimeCommand(this.files!.runtimeSocket, 'show stat');
      } catch (error) {
        if (attempt >= 10) throw error;
        await sleep(100);
      }
    }
  }

  /** Records HAProxy's counts of every finished interval, before GET /traffic answers them. */
  async countFinishedIntervals(): Promise<void> {
    await this.counters?.upToNow();
  }

  /** The route name a backend serves or last served (its counters are that route's), as HAProxy's routes map says. */
  private routeOf(backend: string): string | undefined {
    const label = this.live.backends.get(poolBackendOf(backend))?.label;
    return label === undefined || label === '-' ? undefined : label.slice(label.indexOf(':') + 1);
  }

  listeningPorts(): number[] {
    return [...this.listeners.map((listener) => listener.port), ...(this.tls ? [this.tlsPort] : []), ...this.node.listeningPorts()];
  }

  readiness(): Record<string, unknown> {
    const process = this.process;
    if (process === undefined || !process.running) throw new Error(`the HAProxy data plane is down: ${process?.down ?? 'not started yet'}`);
    return { dataPlane: this.kind, haproxy: { reloads: process.reloads, restarts: process.restarts }, routes: this.plan.length };
  }

  /** The planned routes with the units the running HAProxy sends them new requests to (in the plan's order), and the sessions it has open to each. */
  async view(): Promise<RouteView[]> {
    const open = new Map<string, number>();
    if (this.process?.running) {
      // A slot's server has one copy per thread (threadBackendName), under the same name.
      for (const stat of await serverStats(this.files!.runtimeSocket).catch(() => [])) open.set(stat.server, (open.get(stat.server) ?? 0) + stat.current);
    }
    const routed = routedBackends(this.live);
    // A held route's requests wait in the Node server behind HAProxy (haproxy-slots.ts leaves its hosts to it).
    const held = new Map(this.node.view().flatMap((route) => (route.held === undefined ? [] : [[route.name, route.held] as const])));
    return this.plan.map((route) => {
      const backend = routed.get(routeLabel(route));
      // What HAProxy holds, not what the plan wants: a unit leaving the plan is listed until HAProxy
      // has drained it (a caller waiting for it to go then knows no new request reaches it).
      const upstreams = (backend?.slots ?? []).flatMap((slot, index) =>
        slot.state === 'ready' ? [{ address: slot.address!, unit: slot.unit!, inFlight: open.get(slotName(backend!.name, index)) ?? 0 }] : [],
      );
      const order = new Map(route.targets.map(({ address }, index) => [address, index]));
      upstreams.sort((a, b) => (order.get(a.address) ?? order.size) - (order.get(b.address) ?? order.size));
      const heldHere = held.get(route.name);
      return { name: route.name, kind: route.kind, hosts: route.hosts, upstreams, ...(heldHere === undefined ? {} : { held: heldHere }) };
    });
  }

  async close(reason: StopReason = 'stop'): Promise<void> {
    followHaproxy(undefined);
    this.closing = true;
    // An update in flight (a reload may take seconds) finishes first, or the state is not handed over.
    const settled = await Promise.race([this.updates.close().then(() => true), sleep(SYNC_SETTLE_MS).then(() => false)]);
    this.counters?.stop();
    if (reason === 'restart') {
      // The last reading as late as possible: the next gateway counts on from it.
      if (settled) await this.counters?.flush();
      this.leave(settled);
    } else await this.process?.stop();
    this.trafficLog.close();
    await this.node.close();
  }

  /** Leaves HAProxy serving, and what it holds for the next gateway (haproxy-handover.ts) if `settled` says it is known. */
  private leave(settled: boolean): void {
    const process = this.process;
    if (process === undefined) return;
    const running = process.running;
    process.leave();
    if (!running || !settled) return;
    writeHandover(this.handoverFile, {
      fixedConfig: this.configText([]),
      ownPort: this.node.port(),
      ...(this.tls ? { tlsPort: this.tlsPort } : {}),
      trafficLogPort: this.trafficLogPort,
      ...(this.counters?.lastReading() === undefined ? {} : { counters: this.counters.lastReading()! }),
      state: this.live,
      certificates: this.certificates?.handedOver() ?? [],
    });
  }

  /** The Node server HAProxy forwards what it does not route to, on `port` if it is free (a previous gateway's), else any. */
  private async listenOwn(port: number, policy: GatewayListeners['public']['policy']): Promise<void> {
    try {
      await this.node.listenOn([{ host: '127.0.0.1', port, policy: 'behind-haproxy' }], policy);
    } catch (error) {
      if (port === 0 || (error as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw error;
      await this.node.listenOn([{ host: '127.0.0.1', port: 0, policy: 'behind-haproxy' }], policy);
    }
  }

  /** Applies the latest plan (the update queue folds plans arriving during an update into the next one). */
  private sync(): void {
    if (!this.process?.running || this.closing) return;
    void this.updates.add('haproxy');
  }

  private async update(): Promise<void> {
    const process = this.process!;
    if (!process.running || this.closing) return;
    const { threads, upstreamConnections } = this.settings();
    const step = transition(this.state, this.plan, { ...this.files!, upstreamConnections: threadShare(upstreamConnections, threads) });
    if (step.commands.length > 0) {
      if (reassignsBackend(this.live, step.next)) await this.counters?.flush();
      this.state = step.next;
      const failures = await runtimeCommands(this.files!.runtimeSocket, threadCommands(step.commands, threads));
      if (failures.length > 0) {
        // HAProxy holds something else than the gateway thinks: write the whole state and reload.
        this.log.warn({ failures }, 'haproxy refused runtime commands; reloading to resynchronise');
        await this.reload();
      } else this.live = this.state;
    }
    if (step.reload) {
      this.log.info('haproxy has no spare backend left for a new route: reloading with a larger pool');
      await this.reload();
    }
    const refused = (await this.certificates?.apply(this.files!.runtimeSocket)) ?? [];
    if (refused.length > 0) {
      // The files are current: a reload loads exactly the set wanted.
      this.log.warn({ failures: refused }, 'haproxy refused certificate commands; reloading to resynchronise');
      await this.reload();
    }
  }

  /** A reload starts a worker counting from zero: what the old one counted is read first. */
  private async reload(): Promise<void> {
    await this.counters?.flush();
    await this.process!.reload();
  }

  /** The state for the current plan, as files HAProxy starts from (at start, reload and restart). */
  private writeFiles(): void {
    this.state = reloaded(this.state, this.plan);
    const backends = backendConfigs(this.state);
    const files = this.files!;
    writeFileAtomically(files.lua, connectionHeadersLua);
    writeFileAtomically(files.routesMap, routesMapFile(backends));
    writeFileAtomically(files.hostsMap, hostsMapFile(this.state.hosts));
    writeFileAtomically(files.unitsMap, unitsMapFile(backends));
    this.certificates?.writeAll();
    writeFileAtomically(this.configFile, this.configText(backends));
  }

  /** HAProxy's configuration with these backends (with none: what a handover compares). */
  private configText(backends: BackendConfig[]): string {
    const redirect = this.config.gateway.tls.httpsRedirect ? { httpsRedirectDomain: this.config.domain } : {};
    const tls = this.tls && this.certificates ? { tls: { host: this.tlsHost, port: this.tlsPort, crtList: this.certificates.crtList, domain: this.config.domain, hstsMaxAgeSeconds: this.tls.hstsMaxAgeSeconds } } : {};
    const trafficLog = { port: this.trafficLogPort, sampleEvery: TRAFFIC_LOG_SAMPLE_EVERY };
    return haproxyConfig({ listeners: this.listeners, internalDomain: this.config.gateway.internalDomain, ownPort: this.node.port(), settings: this.settings(), files: this.files!, backends, trafficLog, ...redirect, ...tls });
  }

  private settings(): HaproxySettings {
    return haproxySettings(this.config);
  }
}

/** The files HAProxy runs from, in its state directory (exported for bench/generated-haproxy.ts, like haproxySettings). */
export const haproxyFiles = (dir: string): HaproxyFiles => ({
  runtimeSocket: join(dir, 'runtime.sock'),
  pidFile: join(dir, 'haproxy.pid'),
  hostsMap: join(dir, 'hosts.map'),
  unitsMap: join(dir, 'units.map'),
  routesMap: join(dir, 'routes.map'),
  lua: join(dir, 'connection-headers.lua'),
});

/** HAProxy's settings for a gateway's configuration (exported for bench/generated-haproxy.ts, which runs the same). */
export function haproxySettings({ gateway, http }: PlatformConfig): HaproxySettings {
  return {
    threads: availableParallelism(),
    requestTimeoutSeconds: gateway.requestTimeoutSeconds,
    idleTimeoutSeconds: gateway.idleTimeoutSeconds,
    headersTimeoutSeconds: http.headersTimeoutSeconds,
    maxHeaderSize: gateway.maxHeaderSize,
    maxConnections: http.maxConnections,
    maxConnectionsPerAddress: http.maxConnectionsPerAddress,
    upstreamConnections: gateway.upstreamConnections,
  };
}
