// Test hosts: Linux network namespaces joined by a test bridge, each with its own address on a
// private /24 (10.213.<x>.0/24, x chosen per test run among the unused), its own dockerd (bridge
// networking; the userland proxy publishes unit ports on the host's address) and its own platform
// processes, all entered with `nsenter --net=…`. Machines that reach each other by address, as on
// a real network, and a link that can be taken down (a partition).
//
// Outside the hosts, on the bridge's own address (<prefix>.1): the registry (the hosts cannot reach
// the test process's loopback) and, unless the hosts run an etcd cluster, etcd. Everything made
// here (namespaces, links, the bridge, processes) goes when the test ends, and when the process
// exits after a failure.

import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { startDockerd, type DockerEngine } from './docker.js';
import { startEtcd, type EtcdOptions, type EtcdProcess } from './etcd.js';
import { exitOnSignals } from './exit-on-signal.js';
import { freePort } from './free-port.js';
import { runPlatform, waitHealthy, type PlatformProcess } from './platform.js';
import { startRegistry, type Registry } from './registry.js';
import { buildTestImage, type TestImage } from './test-image.js';

export type HostProcess = PlatformProcess & { url: string };

export interface TestHost {
  /** Also its machine id and the name of its network namespace. */
  readonly name: string;
  /** Its address on the test bridge. */
  readonly address: string;
  readonly engine: DockerEngine;
  /** The running agent, if started. */
  agent: HostProcess | undefined;
  /** Starts this host's agent (bridge networking, advertising the host's address) and waits until it answers. */
  startAgent(extraFlags?: string[]): Promise<HostProcess>;
  /** Starts `platform serve --role <role>` on this host, listening on every address, and waits until it answers. */
  serve(role: string, flags: string[], env?: NodeJS.ProcessEnv): Promise<HostProcess>;
  /** Takes the host's link down: nothing reaches it and it reaches nothing. */
  partition(): void;
  /** Brings the link up again. */
  heal(): void;
}

export interface TestHosts {
  /** `10.213.<x>`: the first three octets of this run's /24. */
  readonly prefix: string;
  /** The bridge's own address: the test process's (and its registry's and etcd's) address on the test network. */
  readonly bridgeAddress: string;
  readonly hosts: TestHost[];
  readonly registry: Registry;
  /** The test image (busybox httpd) in the registry, tag v1. */
  readonly image: TestImage;
  readonly repository: string;
  /** The etcd outside the hosts, unless `etcdUrls` were given. */
  readonly etcd: EtcdProcess | undefined;
  /** `--etcd …` and the registry flags every platform process here takes. */
  readonly flags: string[];
  /** Environment every platform process here takes (the allowed registry). */
  readonly env: NodeJS.ProcessEnv;
  stop(): Promise<void>;
}

export interface TestHostsOptions {
  count: number;
  /** Flags for every agent (e.g. `--announce-ttl`). */
  agentFlags?: string[];
  /** Environment for every agent (e.g. PLATFORM_MAX_UNITS, which an older build ignores where a flag would stop it). */
  agentEnv?: NodeJS.ProcessEnv;
  /** Start an agent on the first `agents` hosts (default all). */
  agents?: number;
  /**
   * Where etcd runs: by default one member on the bridge address; a function instead starts it
   * on the hosts once they exist (`startEtcdCluster` in etcd.ts) and returns its URLs. It is
   * stopped with the hosts.
   */
  etcd?: (hosts: TestHost[]) => Promise<{ urls: string[]; stop(): Promise<void> }>;
  /** The default etcd's niceness and data directory's place (EtcdOptions). */
  etcdOptions?: Pick<EtcdOptions, 'nice' | 'dataParent'>;
  /** The hosts' engines' niceness (DockerdOptions.nice). */
  engineNice?: number;
}

// What to remove when the process exits, whatever state the test left.
const namespaces = new Set<string>();
const links = new Set<string>();
let exitHookInstalled = false;

function ip(args: string[]): void {
  const result = spawnSync('ip', args, { encoding: 'utf8' });
  if (result.status !== 0) throw new Error(`ip ${args.join(' ')} failed: ${result.stderr || result.error?.message}`);
}

function removeNamespace(name: string, killInside: boolean): void {
  // Whatever still runs in it (a process a failed test left) goes first; the namespace lives on until then.
  if (killInside) {
    const pids = (spawnSync('ip', ['netns', 'pids', name], { encoding: 'utf8' }).stdout ?? '').split('\n').filter(Boolean);
    for (const pid of pids) spawnSync('kill', ['-KILL', pid]);
  }
  spawnSync('ip', ['netns', 'del', name], { stdio: 'ignore' });
  namespaces.delete(name);
}

export function removeLink(name: string): void {
  spawnSync('ip', ['link', 'del', name], { stdio: 'ignore' });
  links.delete(name);
}

/** Removes the namespaces and links made here when the process exits (also on a signal). */
export function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // Runs before the engines' and platform processes' own exit hooks (registered later), which
  // remove their containers and kill them: killing a dockerd here would leave its containers.
  process.on('exit', () => {
    for (const name of [...namespaces]) removeNamespace(name, false);
    for (const name of [...links]) removeLink(name);
  });
  exitOnSignals();
}

/** A /24 of 10.213.0.0/16 that no interface here uses yet. */
export function freePrefix(): string {
  const used = spawnSync('ip', ['-4', '-o', 'addr'], { encoding: 'utf8' }).stdout ?? '';
  for (let attempt = 0; attempt < 50; attempt++) {
    const x = 1 + (randomBytes(1)[0]! % 254);
    if (!used.includes(` 10.213.${x}.`)) return `10.213.${x}`;
  }
  throw new Error('no free /24 in 10.213.0.0/16 for test hosts');
}

export function assertTools(): void {
  if (process.getuid?.() !== 0) throw new Error('test hosts need root: they make network namespaces, links and Docker engines');
  for (const tool of ['ip', 'nsenter']) {
    if (spawnSync(tool, ['-V'], { stdio: 'ignore' }).error) throw new Error(`test hosts need ${tool} (Debian packages iproute2 and util-linux)`);
  }
}

/** The bridge, named after the run's /24, with its own address. */
export function makeBridge(prefix: string, run: string): string {
  const bridge = `pt${run}br`;
  links.add(bridge);
  ip(['link', 'add', bridge, 'type', 'bridge']);
  ip(['addr', 'add', `${prefix}.1/24`, 'dev', bridge]);
  ip(['link', 'set', bridge, 'up']);
  return bridge;
}

/** A namespace with a veth whose outer end is on the bridge; returns the outer end's name. */
function makeNamespace(name: string, address: string, bridge: string, outer: string): void {
  namespaces.add(name);
  ip(['netns', 'add', name]);
  links.add(outer);
  ip(['link', 'add', outer, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', name]);
  ip(['link', 'set', outer, 'master', bridge, 'up']);
  ip(['-n', name, 'addr', 'add', `${address}/24`, 'dev', 'eth0']);
  ip(['-n', name, 'link', 'set', 'eth0', 'up']);
  ip(['-n', name, 'link', 'set', 'lo', 'up']);
}

export async function startTestHosts(options: TestHostsOptions): Promise<TestHosts> {
  assertTools();
  installExitHook();
  const prefix = freePrefix();
  const run = prefix.split('.')[2]!;
  const bridgeAddress = `${prefix}.1`;
  const bridge = makeBridge(prefix, run);
  const hosts: TestHost[] = [];
  let registry: Registry | undefined;
  let etcd: EtcdProcess | undefined;
  let etcdOnHosts: { stop(): Promise<void> } | undefined;
  const stop = async (): Promise<void> => {
    await Promise.all(hosts.map((host) => host.agent?.stop()));
    await Promise.all(hosts.map((host) => host.engine.stop()));
    await registry?.stop();
    await etcd?.stop();
    await etcdOnHosts?.stop();
    for (const host of hosts) removeNamespace(host.name, true);
    for (const host of hosts) removeLink(`pt${run}v${hosts.indexOf(host) + 1}`);
    removeLink(bridge);
  };
  try {
    registry = await startRegistry({ address: bridgeAddress });
    // One at a time: engines starting together on a busy machine each wait longer than their bound.
    const engines: { name: string; address: string; outer: string; engine: DockerEngine }[] = [];
    for (let i = 1; i <= options.count; i++) {
      const name = `pt${run}-h${i}`;
      const address = `${prefix}.${10 + i}`;
      const outer = `pt${run}v${i}`;
      makeNamespace(name, address, bridge, outer);
      engines.push({ name, address, outer, engine: await startDockerd({ netns: name, bridge: true, insecureRegistries: [`${prefix}.0/24`], ...(options.engineNice === undefined ? {} : { nice: options.engineNice }) }) });
    }
    const env: NodeJS.ProcessEnv = { PLATFORM_ALLOWED_REGISTRIES: bridgeAddress };
    const flagsOf = { current: [] as string[] };
    for (const { name, address, outer, engine } of engines) hosts.push(testHost(name, address, outer, engine, flagsOf, env, options.agentFlags ?? [], options.agentEnv ?? {}));
    const repository = `hosts/web-${randomBytes(3).toString('hex')}`;
    const image = await buildTestImage(hosts[0]!.engine.docker, registry.host, repository, 'v1', { label: 'one' });
    let etcdUrls: string[];
    if (options.etcd) {
      const started = await options.etcd(hosts);
      etcdOnHosts = started;
      etcdUrls = started.urls;
    } else {
      etcd = await startEtcd({ ...options.etcdOptions, host: bridgeAddress });
      etcdUrls = [etcd.url];
    }
    flagsOf.current = ['--etcd', etcdUrls.join(','), '--insecure-registry', registry.host];
    for (const host of hosts.slice(0, options.agents ?? hosts.length)) await host.startAgent();
    return { prefix, bridgeAddress, hosts, registry, image, repository, etcd, flags: flagsOf.current, env, stop };
  } catch (error) {
    await stop().catch(() => undefined);
    throw error;
  }
}

/** `platform serve --role <role>` in namespace `name`, on every address, waited for until it answers on `address`. */
const serveIn =
  (name: string, address: string, flags: { current: string[] }, env: NodeJS.ProcessEnv) =>
  async (role: string, roleFlags: string[], roleEnv: NodeJS.ProcessEnv = {}): Promise<HostProcess> => {
    const port = await freePort();
    const started = runPlatform(['serve', '--role', role, '--host', '0.0.0.0', '--port', String(port), '--advertise', `${address}:${port}`, ...flags.current, ...roleFlags], { ...env, ...roleEnv }, { netns: name });
    const url = `http://${address}:${port}`;
    try {
      await waitHealthy(url, started);
    } catch (error) {
      await started.stop('SIGKILL');
      throw error;
    }
    return Object.assign(started, { url });
  };

/** A test host without a Docker engine, for what needs only an address of its own (a gateway a test reaches from outside). */
export interface BareHost {
  readonly name: string;
  readonly address: string;
  /** The bridge's own address: the test process's address as the host sees it. */
  readonly bridgeAddress: string;
  /** Starts `platform serve --role <role>` in the host (on every address, with `flags`) and waits until it answers. */
  serve(role: string, flags: string[], env?: NodeJS.ProcessEnv): Promise<HostProcess>;
  /** Runs `platform <args>` in the host, as a process the test starts and waits for itself. */
  run(args: string[], env?: NodeJS.ProcessEnv): PlatformProcess;
  /** Removes the namespace (killing what still runs in it), its link and the bridge. */
  stop(): void;
}

export function startBareHost(): BareHost {
  assertTools();
  installExitHook();
  const prefix = freePrefix();
  const run = prefix.split('.')[2]!;
  const bridge = makeBridge(prefix, run);
  const [name, address, outer] = [`pt${run}-b1`, `${prefix}.11`, `pt${run}v1`];
  try {
    makeNamespace(name, address, bridge, outer);
  } catch (error) {
    removeNamespace(name, true);
    removeLink(outer);
    removeLink(bridge);
    throw error;
  }
  return {
    name,
    address,
    bridgeAddress: `${prefix}.1`,
    serve: serveIn(name, address, { current: [] }, {}),
    run: (args, env = {}) => runPlatform(args, env, { netns: name }),
    stop: () => {
      removeNamespace(name, true);
      removeLink(outer);
      removeLink(bridge);
    },
  };
}

function testHost(
  name: string,
  address: string,
  outer: string,
  engine: DockerEngine,
  flags: { current: string[] },
  env: NodeJS.ProcessEnv,
  agentFlags: string[],
  agentEnv: NodeJS.ProcessEnv,
): TestHost {
  const serve = serveIn(name, address, flags, env);
  const host: TestHost = {
    name,
    address,
    engine,
    agent: undefined,
    serve,
    startAgent: async (extraFlags = []) => {
      host.agent = await serve('agent', ['--network', 'bridge', '--unit-host', address, '--machine-id', name, '--stop-grace', '2', '--drain-seconds', '1', ...agentFlags, ...extraFlags], {
        ...agentEnv,
        DOCKER_HOST: engine.dockerHost,
      });
      return host.agent;
    },
    partition: () => ip(['link', 'set', outer, 'down']),
    heal: () => ip(['link', 'set', outer, 'up']),
  };
  return host;
}
