import { trace } from '../../trace.js';
import type { ServerResponse } from 'node:http';
import { Gauge } from 'prom-client';
import type { FastifyBaseLogger } from 'fastify';
import type { RoleServer } from '../../http/server.js';
import { roleRegistry } from '../../http/metrics.js';
import { apiRoute } from '../../schemas/api.js';
import type { Assignment, ClusterUnit, Machine, MachineDrain, UnitStatus } from '../../schemas/cluster.js';
import type { Deployment, JournalEntry } from '../../schemas/release.js';
import type { Service } from '../../schemas/service.js';
import type { EventKind, Snapshot } from '../../schemas/events.js';
import { isFinished } from '../../schemas/states.js';
import { PrefixCache, decodeCached, type CachedValue } from '../../store/prefix-cache.js';
import type { Store, WatchEvent } from '../../store/store.js';
import { assignmentRoot, deploymentPrefix, journalPrefix, machineDrainPrefix, machinePrefix, servicePrefix, unitStatusRoot } from '../../store/keys.js';
import { joinMachine, joinUnit } from './cluster-view.js';
import { envValuesSeenBy, redactRecord } from '../../auth/env-redaction.js';
import { untilCredentialsEnd } from '../../auth/credential-lifetime.js';
import { MAX_EVENT_STREAMS, StreamLimit } from '../../http/stream-limit.js';

// GET /events: Server-Sent Events of the cluster for the dashboard. One watched copy of each key
// prefix per process (started by the first client, closed shortly after the last one leaves) is
// fanned out to every client: each event is serialised once and written to all of them.
//
// A stream opens with a `snapshot` of everything the dashboard shows, taken from the same copies
// in the same tick the client joins the fan-out, so nothing falls between the snapshot and the
// first change. Every later event replaces one record (`{key, value}`) or removes it
// (`{key, deleted: true}`). A client that reconnects gets a fresh snapshot; there is no replay.

export interface EventHubOptions {
  /** A comment line is written this often so proxies and browsers keep idle streams open. */
  heartbeatMs?: number;
  /** The watches stay open this long after the last client leaves, for reloads and reconnects. */
  lingerMs?: number;
  /** A client that lets this much output pile up is disconnected (it reconnects to a snapshot). */
  maxBufferedBytes?: number;
  /** How many of the newest deployments and journal entries a snapshot carries. */
  recentLimit?: number;
}

interface Copies {
  service: PrefixCache;
  deployment: PrefixCache;
  journal: PrefixCache;
  machine: PrefixCache;
  drain: PrefixCache;
  assignment: PrefixCache;
  status: PrefixCache;
}

const clientsGauge = new Gauge({
  name: 'platform_events_clients',
  help: 'Clients connected to GET /events.',
  registers: [roleRegistry('orchestrator')],
});

const watchesGauge = new Gauge({
  name: 'platform_events_watches',
  help: 'Key prefixes watched for GET /events (one per prefix while any client is connected).',
  registers: [roleRegistry('orchestrator')],
});

const PREFIXES: Record<keyof Copies, string> = {
  service: servicePrefix,
  deployment: deploymentPrefix,
  journal: journalPrefix,
  machine: machinePrefix,
  drain: machineDrainPrefix,
  assignment: assignmentRoot,
  status: unitStatusRoot,
};

const STREAM_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
  connection: 'keep-alive',
  'x-accel-buffering': 'no',
};


/**
 * A service record with its env values redacted. The store is not this role's to trust: a record
 * without a config (one written by hand, or by bench/scale.ts once) has no env to hide, and
 * reading its env threw inside the watch's callback, which ended the orchestrator's process.
 */
const redactService = (service: Service): Service => ((service as Partial<Service>).config?.env ? redactRecord(service) : service);

const frame = (kind: string, revision: number, data: unknown): string => `event: ${kind}\nid: ${revision}\ndata: ${JSON.stringify(data)}\n\n`;

export class EventHub {
  private copies: Copies | undefined;
  private starting: Promise<Copies> | undefined;
  private readonly clients = new Set<ServerResponse>();
  /** Clients that see only some services' env values (src/auth/env-redaction.ts): the others reach them redacted. */
  private readonly envSeenBy = new WeakMap<ServerResponse, (service: string) => boolean>();
  private revision = 0;
  private lingerTimer: NodeJS.Timeout | undefined;
  private tickTimer: NodeJS.Timeout | undefined;
  private lastHeartbeat = Date.now();
  private closed = false;
  private readonly heartbeatMs: number;
  private readonly lingerMs: number;
  private readonly maxBufferedBytes: number;
  private readonly recentLimit: number;

  constructor(
    private readonly store: Store,
    private readonly log: FastifyBaseLogger,
    options: EventHubOptions = {},
  ) {
    this.heartbeatMs = options.heartbeatMs ?? 15_000;
    this.lingerMs = options.lingerMs ?? 5_000;
    this.maxBufferedBytes = options.maxBufferedBytes ?? 8 * 1024 * 1024;
    this.recentLimit = options.recentLimit ?? 200;
  }

  get clientCount(): number {
    return this.clients.size;
  }

  /** Whether the prefix watches are open. */
  get watching(): boolean {
    return this.copies !== undefined;
  }

  /**
   * Starts the watches if needed, then (synchronously, so no change falls in between) writes the
   * stream's headers and snapshot and joins the response to the fan-out. Rejects with the store's
   * error while the store is unreachable, before anything is written. `seesEnvOf` says whose env
   * values the client sees (absent: every service's); the others reach it redacted.
   */
  async attach(response: ServerResponse, beforeWrite: () => void, seesEnvOf?: (service: string) => boolean): Promise<void> {
    if (this.closed) throw new Error('the event hub is closed');
    clearTimeout(this.lingerTimer);
    this.lingerTimer = undefined;
    const copies = await this.start();
    if (response.destroyed) return this.scheduleLinger();
    const snapshot = frame('snapshot', this.revision, this.snapshot(copies, seesEnvOf));
    beforeWrite();
    response.writeHead(200, STREAM_HEADERS);
    response.write(`retry: 2000\n\n${snapshot}`);
    this.clients.add(response);
    if (seesEnvOf) this.envSeenBy.set(response, seesEnvOf);
    clientsGauge.inc();
    response.once('close', () => this.detach(response));
  }

  /**
   * Starts the watches ahead of a client (the dashboard page asks while its scripts load); they
   * close after the linger time if no client comes.
   */
  warm(): void {
    if (this.closed) return;
    void this.start().then(
      () => this.scheduleLinger(),
      () => undefined,
    );
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.lingerTimer);
    for (const client of [...this.clients]) client.end();
    await this.stop();
  }

  private detach(response: ServerResponse): void {
    if (!this.clients.delete(response)) return;
    clientsGauge.dec();
    this.scheduleLinger();
  }

  private scheduleLinger(): void {
    if (this.clients.size > 0 || this.closed || this.lingerTimer) return;
    this.lingerTimer = setTimeout(() => {
      this.lingerTimer = undefined;
      if (this.clients.size === 0) void this.stop();
    }, this.lingerMs);
    this.lingerTimer.unref();
  }

  private start(): Promise<Copies> {
    if (this.copies) return Promise.resolve(this.copies);
    this.starting ??= this.open().finally(() => {
      this.starting = undefined;
    });
    return this.starting;
  }

  private async open(): Promise<Copies> {
    const names = Object.keys(PREFIXES) as (keyof Copies)[];
    const started = await Promise.allSettled(names.map((name) => PrefixCache.start(this.store, PREFIXES[name])));
    const failed = started.find((result) => result.status === 'rejected');
    if (failed || this.closed) {
      await Promise.all(started.map((result) => (result.status === 'fulfilled' ? result.value.close() : undefined)));
      throw failed ? failed.reason : new Error('the event hub is closed');
    }
    const copies = Object.fromEntries(names.map((name, i) => [name, (started[i] as PromiseFulfilledResult<PrefixCache>).value])) as unknown as Copies;
    for (const name of names) {
      for (const entry of copies[name].values()) this.revision = Math.max(this.revision, entry.modRevision);
      copies[name].onChange((event) => this.publish(copies, name, event));
    }
    watchesGauge.inc(names.length);
    this.copies = copies;
    this.lastHeartbeat = Date.now();
    this.tickTimer = setInterval(() => this.tick(copies), 1000).unref();
    return copies;
  }

  private async stop(): Promise<void> {
    const copies = this.copies;
    if (!copies) return;
    this.copies = undefined;
    clearInterval(this.tickTimer);
    watchesGauge.dec(Object.keys(copies).length);
    await Promise.all(Object.values(copies).map((copy: PrefixCache) => copy.close()));
  }

  /**
   * Heartbeats, and the store check: a copy that lost the store may have missed changes, so every
   * stream is ended; clients reconnect, and get a snapshot once the copies have listed again.
   */
  private tick(copies: Copies): void {
    try {
      // A copy's reads throw while its own ping of the store fails.
      for (const copy of Object.values(copies) as PrefixCache[]) copy.get(copy.prefix);
    } catch (error) {
      if (this.clients.size > 0) this.log.warn({ err: error }, 'store unreachable: ending event streams');
      for (const client of [...this.clients]) client.end();
      return;
    }
    if (Date.now() - this.lastHeartbeat >= this.heartbeatMs) {
      this.lastHeartbeat = Date.now();
      this.broadcast(`: heartbeat ${new Date().toISOString()}\n\n`);
    }
  }

  /**
   * Sends the record as the copy now holds it, not as the event carried it: a watch that resumed
   * after an outage may replay changes older than what the copy listed meanwhile.
   */
  private publish(copies: Copies, name: keyof Copies, event: WatchEvent): void {
    this.revision = Math.max(this.revision, event.modRevision);
    if (this.clients.size === 0) return;
    const key = event.key.slice(PREFIXES[name].length);
    let kind: EventKind;
    let value: unknown;
    try {
      if (name === 'assignment' || name === 'status') {
        kind = 'unit';
        value = this.unitAt(copies, key);
      } else if (name === 'machine' || name === 'drain') {
        kind = 'machine';
        value = this.machineAt(copies, key);
      } else {
        kind = name;
        const entry = copies[name].get(event.key);
        value = entry && decodeCached(entry);
      }
    } catch {
      return; // the store is unreachable: the next tick ends every stream
    }
    const data = value === undefined ? { key, deleted: true } : { key, value };
    if (kind === 'unit') trace('orchestrator.unit', `${key} ${value ? `${(value as ClusterUnit).active}/${(value as ClusterUnit).sub}` : 'deleted'}`);
    const text = frame(kind, event.modRevision, data);
    const redacted =
      kind === 'service' && value ? { service: key, text: frame(kind, event.modRevision, { key, value: redactService(value as Service) }) } : undefined;
    this.broadcast(text, redacted);
  }

  private unitAt(copies: Copies, key: string): ClusterUnit | undefined {
    const assignment = copies.assignment.get(assignmentRoot + key);
    const status = copies.status.get(unitStatusRoot + key);
    return joinUnit(assignment && decodeCached<Assignment>(assignment), status && decodeCached<UnitStatus>(status));
  }

  /** The machine with its drain (the two keys share the machine id). */
  private machineAt(copies: Copies, id: string): Machine | undefined {
    const machine = copies.machine.get(machinePrefix + id);
    const drain = copies.drain.get(machineDrainPrefix + id);
    return joinMachine(machine && decodeCached<Machine>(machine), drain && decodeCached<MachineDrain>(drain));
  }

  /** Writes `text` to every client, or `redacted.text` to those that may not see `redacted.service`'s env values. */
  private broadcast(text: string, redacted?: { service: string; text: string }): void {
    for (const client of this.clients) {
      if (client.writableLength > this.maxBufferedBytes) {
        this.log.warn({ buffered: client.writableLength }, 'event stream client is too slow: disconnecting it');
        client.destroy();
        continue;
      }
      const seesEnvOf = redacted && this.envSeenBy.get(client);
      client.write(seesEnvOf && !seesEnvOf(redacted.service) ? redacted.text : text);
    }
  }

  private snapshot(copies: Copies, seesEnvOf: ((service: string) => boolean) | undefined): Snapshot {
    const byKey = <T>(copy: PrefixCache, entries: CachedValue[] = copy.values()): Record<string, T> =>
      Object.fromEntries(entries.map((entry) => [entry.key.slice(copy.prefix.length), decodeCached<T>(entry)]));
    const units: Record<string, ClusterUnit> = {};
    const keys = new Set([
      ...copies.assignment.values().map((entry) => entry.key.slice(assignmentRoot.length)),
      ...copies.status.values().map((entry) => entry.key.slice(unitStatusRoot.length)),
    ]);
    for (const key of keys) {
      const unit = this.unitAt(copies, key);
      if (unit) units[key] = unit;
    }
    const deployments = copies.deployment.values();
    // Ids are time-ordered, so the last entry of a service is its newest deployment.
    const newestOfService = new Map(deployments.map((entry, i) => [decodeCached<Deployment>(entry).service, i]));
    const newest = new Set(newestOfService.values());
    // The newest deployments, plus any older one still running, so progress shows after a reload,
    // plus every service's newest (with hundreds of services, what each one runs and wants).
    const recent = deployments.filter(
      (entry, i) => i >= deployments.length - this.recentLimit || newest.has(i) || !isFinished(decodeCached<Deployment>(entry)),
    );
    return {
      revision: this.revision,
      services: seesEnvOf
        ? Object.fromEntries(Object.entries(byKey<Service>(copies.service)).map(([key, service]) => [key, seesEnvOf(key) ? service : redactService(service)]))
        : byKey<Service>(copies.service),
      units,
      machines: Object.fromEntries(copies.machine.values().map((entry) => {
        const id = entry.key.slice(machinePrefix.length);
        return [id, this.machineAt(copies, id)!];
      })),
      deployments: byKey<Deployment>(copies.deployment, recent),
      journal: byKey<JournalEntry>(copies.journal, copies.journal.values().slice(-this.recentLimit)),
    };
  }
}

/** Registers GET /events on a role server; at most `maxStreams` are open at once (503 past it). */
export function eventsRoute(server: RoleServer, hub: EventHub, maxStreams = MAX_EVENT_STREAMS): void {
  const streams = new StreamLimit('event streams', maxStreams);
  server.route({
    ...apiRoute('GET /events'),
    handler: async (request, reply) => {
      streams.admit(reply);
      await hub.attach(reply.raw, () => reply.hijack(), envValuesSeenBy(request));
      // The stream ends with the token or session that opened it; the page then finds out why.
      reply.raw.once('close', untilCredentialsEnd(request, () => reply.raw.end()));
      // A client that left while the watches started got no stream: there is nothing to send.
      if (!reply.sent) reply.hijack();
    },
  });
}
