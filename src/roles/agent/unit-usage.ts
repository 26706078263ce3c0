import type Docker from 'dockerode';
import type { FastifyBaseLogger } from 'fastify';
import { HISTORY_SECONDS, type UnitUsage, type UsageSample } from '../../schemas/service-metrics.js';
import { SampleRing, intervalStart, ringCapacity } from '../../metrics-history/sample-ring.js';
import { listUnitContainers } from './containers.js';
import { instanceOf } from '../../units.js';
import { dockerErrorMessage, withTimeout } from './docker-client.js';

// The last hour of this machine's units' CPU and memory, for the dashboard's graphs. Once per
// --metrics-interval, whoever looks or not, each running unit container is read once (Docker's
// one-shot stats: the cgroup's counters, without the second it waits for a CPU delta), so the
// engine's cost is one read per unit per interval, not per viewer. CPU is the counter's growth
// since the previous read of the same container, over the time between the reads.

/** What one read of a container's counters gives: `cpuNanos` (cumulative) and the time of the read. */
interface CpuReading {
  container: string;
  cpuNanos: number;
  readAt: number;
}

/** The part of Docker's stats answer read here (cgroup v1 and v2 name the page cache differently). */
export interface ContainerStats {
  cpu_stats?: { cpu_usage?: { total_usage?: number } };
  memory_stats?: { usage?: number; stats?: Record<string, number> };
}

/** Memory as `docker stats` shows it: usage less the inactive page cache, which the kernel reclaims first. */
export function memoryInUse(stats: ContainerStats): number {
  const memory = stats.memory_stats;
  const usage = memory?.usage ?? 0;
  const cache = memory?.stats?.inactive_file ?? memory?.stats?.total_inactive_file ?? 0;
  return Math.max(0, usage - cache);
}

/** Cores in use between two reads of the same container; null without an earlier read of it. */
export function coresBetween(previous: CpuReading | undefined, current: CpuReading): number | null {
  if (!previous || previous.container !== current.container || current.readAt <= previous.readAt) return null;
  return Math.max(0, (current.cpuNanos - previous.cpuNanos) / ((current.readAt - previous.readAt) * 1e6));
}

const READ_TIMEOUT_MS = 5_000;
const PARALLEL_READS = 8;

class UnitHistory {
  readonly samples: SampleRing<UsageSample>;
  reading: CpuReading | undefined;

  constructor(capacity: number) {
    this.samples = new SampleRing(capacity);
  }
}

export class UnitUsageSampler {
  private readonly units = new Map<string, UnitHistory>();
  private readonly capacity: number;
  private timer: NodeJS.Timeout | undefined;
  private pass: Promise<void> = Promise.resolve();
  private failing = false;

  constructor(
    private readonly docker: Docker,
    private readonly machineId: string,
    readonly intervalSeconds: number,
    private readonly log: FastifyBaseLogger,
  ) {
    this.capacity = ringCapacity(HISTORY_SECONDS, intervalSeconds);
  }

  start(): void {
    this.timer = setInterval(() => {
      this.pass = this.pass.then(() => this.sample());
    }, this.intervalSeconds * 1000);
    this.timer.unref();
    this.pass = this.sample();
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.pass;
  }

  /** The last hour of every unit read here, or of one service's. */
  usage(service?: string): UnitUsage[] {
    const oldest = Date.now() - HISTORY_SECONDS * 1000;
    const found: UnitUsage[] = [];
    for (const [unit, history] of this.units) {
      if (service !== undefined && instanceOf(service, unit) === undefined) continue;
      const samples = history.samples.toArray().filter((sample) => sample.at >= oldest);
      if (samples.length > 0) found.push({ unit, machine: this.machineId, samples });
    }
    return found.sort((a, b) => a.unit.localeCompare(b.unit, 'en', { numeric: true }));
  }

  private async sample(): Promise<void> {
    let containers;
    try {
      containers = (await withTimeout(listUnitContainers(this.docker, this.machineId), READ_TIMEOUT_MS, 'Docker')).filter((container) => container.state === 'running');
    } catch (error) {
      if (!this.failing) this.log.warn({ err: error }, `unit CPU and memory not read: ${dockerErrorMessage(error)}`);
      this.failing = true;
      return;
    }
    this.failing = false;
    const at = intervalStart(Date.now(), this.intervalSeconds);
    for (let i = 0; i < containers.length; i += PARALLEL_READS) {
      await Promise.all(containers.slice(i, i + PARALLEL_READS).map((container) => this.read(container.unit, container.id, at)));
    }
    this.forgetGone(at);
  }

  private async read(unit: string, container: string, at: number): Promise<void> {
    let stats: ContainerStats;
    try {
      stats = (await withTimeout(this.docker.getContainer(container).stats({ stream: false, 'one-shot': true } as { stream: false }), READ_TIMEOUT_MS, 'Docker')) as ContainerStats;
    } catch {
      return; // Stopped between the listing and the read, or the engine is slow: this interval has no point for it.
    }
    let history = this.units.get(unit);
    if (!history) {
      history = new UnitHistory(this.capacity);
      this.units.set(unit, history);
    }
    const reading: CpuReading = { container, cpuNanos: stats.cpu_stats?.cpu_usage?.total_usage ?? 0, readAt: Date.now() };
    const cpu = coresBetween(history.reading, reading);
    history.reading = reading;
    if (history.samples.newest()?.at === at) return;
    history.samples.push({ at, cpu, memoryBytes: memoryInUse(stats) });
  }

  /** Units whose newest point left the window: their history is dropped, so the map holds what ran in the last hour. */
  private forgetGone(at: number): void {
    for (const [unit, history] of this.units) {
      const newest = history.samples.newest();
      if (newest === undefined || newest.at < at - HISTORY_SECONDS * 1000) this.units.delete(unit);
    }
  }
}
