import type Docker from 'dockerode';
import type { Assignment } from '../src/schemas/cluster.js';
import { containerCreateOptions } from '../src/roles/agent/container-spec.js';
import { defaultUnitLogs } from '../src/config.js';
import { startEtcd, type EtcdProcess } from '../test/harness/etcd.js';
import { startDockerd, type DockerEngine } from '../test/harness/docker.js';
import { startRegistry, type Registry } from '../test/harness/registry.js';
import { freePort } from '../test/harness/free-port.js';
import { serveRole, type PlatformProcess } from '../test/harness/platform.js';

// What every benchmark starts: a real etcd, dockerd and registry on loopback, and the roles it
// measures as separate `platform serve` processes (agents with host networking).

export type BenchRole = 'directory' | 'scheduler' | 'orchestrator' | 'agent' | 'gateway';

export interface BenchPlatform {
  etcd: EtcdProcess;
  engine: DockerEngine;
  registry: Registry;
  roles: Partial<Record<BenchRole, PlatformProcess & { url: string }>>;
  url(role: BenchRole): string;
  stop(): Promise<void>;
}

/** `env` goes to every role's process (bench/deploy-trace.ts turns on PLATFORM_TRACE with it). */
export async function startBenchPlatform(roles: BenchRole[], machineId: string, env: NodeJS.ProcessEnv = {}): Promise<BenchPlatform> {
  const [etcd, engine, registry] = await Promise.all([startEtcd(), startDockerd(), startRegistry()]);
  const flags = ['--etcd', etcd.url];
  const started: BenchPlatform['roles'] = {};
  for (const role of roles) {
    const extra = role === 'agent' ? ['--network', 'host', '--machine-id', machineId, '--stop-grace', '1', '--drain-seconds', '0'] : [];
    started[role] = await serveRole(role, await freePort(), [...flags, ...extra], role === 'agent' ? { ...env, DOCKER_HOST: engine.dockerHost } : env);
  }
  return {
    etcd,
    engine,
    registry,
    roles: started,
    url: (role) => {
      const process = started[role];
      if (!process) throw new Error(`${role} was not started`);
      return process.url;
    },
    stop: async () => {
      await Promise.all(Object.values(started).map((process) => process.stop()));
      await Promise.all([registry.stop(), etcd.stop()]);
      await engine.stop();
    },
  };
}

/** Pulls an image into the engine, so that runs measure starting containers, not downloads. */
export function pullImage(engine: DockerEngine, reference: string): Promise<void> {
  return new Promise<void>((resolve, reject) =>
    engine.docker.pull(reference, {}, (error, stream) => (error ? reject(error) : engine.docker.modem.followProgress(stream!, (e) => (e ? reject(e) : resolve())))),
  );
}

/**
 * How the reference creates its containers: `unit` with the options the agent gives a unit
 * (labels, dropped capabilities, no-new-privileges, private IPC; host networking as the
 * benchmarks' agent), so the floor does what a deploy does in Docker; `bridge-unit` the same with
 * bridge networking and the port published, as a test host's agent creates a unit (bench/scale.ts);
 * `bare` with only the image, PORT and host networking, as the reference did until 2026-11-23.
 */
export type ReferenceOptions = 'unit' | 'bridge-unit' | 'bare';

function referenceCreateOptions(kind: ReferenceOptions, name: string, image: string, port: number): Docker.ContainerCreateOptions {
  if (kind === 'bare') return { name, Image: image, Env: [`PORT=${port}`], HostConfig: { NetworkMode: 'host' } };
  const assignment: Assignment = {
    unit: name,
    service: 'reference',
    instance: 1,
    machine: 'reference',
    release: 1,
    spec: 'reference',
    image,
    ports: [],
    env: {},
    stopGraceSeconds: 1,
    deployment: 'reference',
    assignedAt: new Date().toISOString(),
  };
  // With the log rotation every unit gets (an agent's default): the floor creates what the agent creates.
  return containerCreateOptions({ assignment, machineId: 'reference', network: kind === 'bridge-unit' ? 'bridge' : 'host', port, logs: defaultUnitLogs });
}

/** A floor container's step answered, `elapsed` ms after the floor's clock started (bench/deploy-trace.ts). */
export type FloorMark = (step: 'created' | 'started', elapsed: number) => void;

/**
 * Creates and starts `count` containers of `image` straight through the Docker API, all at once
 * (each started as soon as its create returns): the floor. `mark` is told when each step answers;
 * `stopped` is awaited with the elapsed time before the containers are removed (bench/deploy-cpu.ts
 * ends its CPU window there).
 */
export async function dockerApiStart(
  engine: DockerEngine,
  image: string,
  count: number,
  kind: ReferenceOptions = 'unit',
  mark?: FloorMark,
  stopped?: (elapsed: number) => Promise<void>,
): Promise<number> {
  const prefix = `ref-${Math.random().toString(36).slice(2, 8)}`;
  const ports = await Promise.all(Array.from({ length: count }, () => freePort()));
  const started = performance.now();
  const containers = await Promise.all(
    ports.map(async (port, i) => {
      const container = await engine.docker.createContainer(referenceCreateOptions(kind, `${prefix}-${i + 1}.service`, image, port));
      mark?.('created', performance.now() - started);
      await container.start();
      mark?.('started', performance.now() - started);
      return container;
    }),
  );
  const elapsed = performance.now() - started;
  await stopped?.(elapsed);
  await Promise.all(containers.map((c) => c.remove({ force: true })));
  return elapsed;
}
