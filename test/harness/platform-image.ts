import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import type Docker from 'dockerode';
import type { DockerEngine } from './docker.js';
import { REGISTRY_ADDRESS } from './registry.js';
import { importRootfs } from './rootfs.js';
import { ensureCommand } from './system-packages.js';

// The platform's own image, built from the repository's Dockerfile on a test engine, and its roles
// run as containers. Docker Hub is out of reach here but the npm registry is not, so the base image
// is made from this machine's Node runtime and npm (rootfs.ts) and passed as BASE_IMAGE. The test
// engine has no bridge network (docker.ts): the build's RUN steps and every container use the
// host's network, so they reach the npm registry, the test etcd and the test registry on 127.0.0.1.

export const repositoryRoot = fileURLToPath(new URL('../../../', import.meta.url));

/** Imports a Node 20 base image (node, npm, busybox sh, this machine's CAs) as `tag` and returns `tag`. */
export async function makeNodeBaseImage(docker: Docker, tag = 'platform-test/node-base:20'): Promise<string> {
  const [repo, version] = tag.split(':') as [string, string];
  const applets = ['sh', 'cat', 'cp', 'echo', 'env', 'ls', 'mkdir', 'mv', 'rm', 'test', '[', 'true'];
  const changes = ['ENV PATH=/usr/local/bin:/usr/bin:/bin HOME=/root NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt', 'CMD ["node"]'];
  await importRootfs(docker, { applets, npm: true, caCertificates: true }, { repo, tag: version, changes });
  return tag;
}

export interface PlatformImageBuild {
  tag: string;
  /** What the CLI reported sending as the build context, in bytes. */
  contextBytes: number;
  /** The built image's size as the engine reports it, in bytes. */
  imageBytes: number;
  seconds: number;
}

const units: Record<string, number> = { B: 1, kB: 1e3, KB: 1e3, MB: 1e6, GB: 1e9 };

/** "Sending build context to Docker daemon  2.56MB" → bytes. */
function contextSize(output: string): number {
  const match = /Sending build context to Docker daemon\s+([\d.]+)\s*([kKMG]?B)/.exec(output);
  if (!match) throw new Error(`the build did not report its context size:\n${output.slice(-2000)}`);
  return Number(match[1]) * units[match[2]!]!;
}

/**
 * `docker build` of the repository with the docker CLI, which reads .dockerignore as an operator's
 * build does. DIST=context takes the dist/ this test run was built from.
 */
export async function buildPlatformImage(engine: DockerEngine, baseImage: string, tag: string, dist: 'build' | 'context' = 'context'): Promise<PlatformImageBuild> {
  ensureCommand('docker', 'docker.io');
  const started = performance.now();
  const args = ['-H', engine.dockerHost, 'build', '--network', 'host', '--build-arg', `BASE_IMAGE=${baseImage}`, '--build-arg', `DIST=${dist}`, '-t', tag, '.'];
  // The legacy builder reports the context size, and the docker CLI here has no buildx plugin.
  const child = spawn('docker', args, { cwd: repositoryRoot, env: { ...process.env, DOCKER_BUILDKIT: '0' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
  if (code !== 0) throw new Error(`docker build exited with ${code}:\n${output.slice(-4000)}`);
  const image = await engine.docker.getImage(tag).inspect();
  return { tag, contextBytes: contextSize(output), imageBytes: image.Size, seconds: (performance.now() - started) / 1000 };
}

export interface RoleContainer {
  readonly url: string;
  readonly container: Docker.Container;
  /** The container's last log lines, for failure messages. */
  logs(): Promise<string>;
  remove(): Promise<void>;
}

export interface RoleContainerOptions {
  /** `serve` flags after --role and --port. */
  flags?: string[];
  env?: Record<string, string>;
  /** host-path:container-path mounts. */
  binds?: string[];
}

/** Starts `platform serve --role <role> --port <port>` from `image` with host networking (not yet answering). */
export async function runRoleContainer(docker: Docker, image: string, role: string, port: number, options: RoleContainerOptions = {}): Promise<RoleContainer> {
  const env = { PLATFORM_LOG_LEVEL: 'warn', PLATFORM_ALLOWED_REGISTRIES: REGISTRY_ADDRESS, ...options.env };
  const container = await docker.createContainer({
    Image: image,
    Cmd: ['serve', '--role', role, '--port', String(port), ...(options.flags ?? [])],
    Env: Object.entries(env).map(([key, value]) => `${key}=${value}`),
    Labels: { 'platform-test.role': role },
    HostConfig: { NetworkMode: 'host', Binds: options.binds ?? [] },
  });
  await container.start();
  return {
    url: `http://127.0.0.1:${port}`,
    container,
    logs: async () => (await container.logs({ stdout: true, stderr: true, tail: 40 })).toString('utf8'),
    remove: () => container.remove({ force: true }),
  };
}

/** Polls `url` + `path` until it answers 200; fails with the container's logs if it exits or never does. */
export async function waitAnswering(role: RoleContainer, path: '/healthz' | '/readyz', timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      const response = await fetch(`${role.url}${path}`, { signal: AbortSignal.timeout(1000) });
      await response.body?.cancel();
      if (response.ok) return;
    } catch {
      // not listening yet
    }
    const state = (await role.container.inspect()).State;
    if (!state.Running) throw new Error(`the container exited with ${state.ExitCode}:\n${await role.logs()}`);
    await sleep(50);
  }
  throw new Error(`${role.url}${path} did not answer 200 within ${timeoutMs} ms:\n${await role.logs()}`);
}
