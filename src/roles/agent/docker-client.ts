import Docker from 'dockerode';

// The agent talks to the engine named by --docker-host, else by DOCKER_HOST (dockerode's usual
// rules), else the default socket.

export const defaultDockerHost = 'unix:///var/run/docker.sock';

/** The engine address for messages: the explicit one, DOCKER_HOST, or the default socket. */
export const describeDockerHost = (dockerHost?: string): string => dockerHost ?? process.env.DOCKER_HOST ?? defaultDockerHost;

export function connectDocker(dockerHost?: string): Docker {
  if (!dockerHost) return new Docker();
  if (dockerHost.startsWith('unix://')) return new Docker({ socketPath: dockerHost.slice('unix://'.length) });
  if (dockerHost.startsWith('/')) return new Docker({ socketPath: dockerHost });
  const url = new URL(dockerHost);
  const protocol = url.protocol.replace(/:$/, '');
  return new Docker({
    host: url.hostname,
    port: url.port || (protocol === 'https' ? 2376 : 2375),
    protocol: protocol === 'tcp' ? 'http' : (protocol as 'http' | 'https' | 'ssh'),
  });
}

/** Rejects when `promise` has not settled within `ms`: a hung engine must not hang the agent. */
export function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Docker's errors carry the engine's JSON reason; the plain message is what people need. */
export function dockerErrorMessage(error: unknown): string {
  const withJson = error as { json?: { message?: string }; message?: string; code?: string };
  return withJson.json?.message ?? withJson.message ?? String(error);
}

export const engineCheckTimeoutMs = 5_000;

/** Whether the engine answers, with its version or why not (the machine record's `docker`). */
export async function checkEngine(docker: Docker): Promise<{ reachable: boolean; version?: string; error?: string }> {
  try {
    const version = await withTimeout(docker.version(), engineCheckTimeoutMs, 'Docker engine');
    return { reachable: true, version: version.Version };
  } catch (error) {
    return { reachable: false, error: dockerErrorMessage(error) };
  }
}

/** How long an engine's version, once asked, is given without asking again (the ask is in the background). */
const ENGINE_VERSION_MAX_AGE_MS = 60_000;

/**
 * The agent's engine check, made on every reconcile pass: whether the engine answers `/_ping`,
 * with its version as last asked. `docker version` is not cheap on every pass: dockerd 20.10 runs
 * `runc --version` and `docker-init --version` to answer it, which took 5-10 ms on a quiet
 * machine and up to 300 ms on a loaded one, and that held up the pass that creates a deploy's
 * containers (and competed with them for the CPU). `/_ping` answers from memory in under a
 * millisecond. The version is asked when the engine first answers (and after it was unreachable:
 * it may come back upgraded), and again in the background once it is a minute old.
 */
export class EngineCheck {
  private version: string | undefined;
  private versionAskedAt = 0;
  private asking: Promise<void> | undefined;

  constructor(
    private readonly docker: Pick<Docker, 'ping' | 'version'>,
    private readonly versionMaxAgeMs = ENGINE_VERSION_MAX_AGE_MS,
  ) {}

  async check(): Promise<{ reachable: boolean; version?: string; error?: string }> {
    try {
      await withTimeout(this.docker.ping(), engineCheckTimeoutMs, 'Docker engine');
    } catch (error) {
      this.version = undefined;
      return { reachable: false, error: dockerErrorMessage(error) };
    }
    if (this.version === undefined) await this.askVersion();
    else if (Date.now() - this.versionAskedAt >= this.versionMaxAgeMs) void this.askVersion();
    return { reachable: true, ...(this.version === undefined ? {} : { version: this.version }) };
  }

  /** One ask at a time; a failed one leaves the version unknown until the next pass asks again. */
  private askVersion(): Promise<void> {
    this.asking ??= withTimeout(this.docker.version(), engineCheckTimeoutMs, 'Docker engine')
      .then(
        (answer) => {
          this.version = answer.Version;
          this.versionAskedAt = Date.now();
        },
        () => undefined,
      )
      .finally(() => {
        this.asking = undefined;
      });
    return this.asking;
  }
}

/**
 * Whether the engine has Docker's default `bridge` network, which bridge-mode units publish their
 * ports through (an engine run with `--bridge=none` has none); undefined when the engine does not answer.
 */
export async function hasBridgeNetwork(docker: Pick<Docker, 'listNetworks'>): Promise<boolean | undefined> {
  try {
    const networks = await withTimeout(docker.listNetworks({ filters: { name: ['bridge'] } }), engineCheckTimeoutMs, 'Docker engine');
    return networks.some((network) => network.Name === 'bridge');
  } catch {
    return undefined;
  }
}

/**
 * What a person reads when no engine answers (`platform up` at start, the agent's /readyz): what
 * follows from it and what to do, since the first deploy would otherwise fail with no hint why.
 */
export const engineUnreachableAdvice = (dockerHost: string | undefined, error: string): string =>
  `no Docker engine reachable at ${describeDockerHost(dockerHost)} (${error}): units cannot start on this machine until one is. ` +
  'Start Docker (e.g. sudo systemctl start docker), or point DOCKER_HOST at a running engine, and make sure this user may use its socket (the docker group).';
