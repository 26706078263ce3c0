import { pipeline } from 'node:stream/promises';
import { InvalidArgumentError, Option, type Command } from 'commander';
import { OrchestratorClient } from './orchestrator-client.js';
import type { DeployReply } from '../schemas/release.js';
import { currentTarget } from '../schemas/states.js';
import { watchDeployment } from './deploy-watch.js';
import { table } from './table.js';
import { addNotifyCommands } from './notify-commands.js';
import { watchStatus } from './status-watch.js';
import { engineColumn } from './status-screen.js';
import { DurationError, parseDuration } from '../auth/duration.js';
import type { Token, TokenRole } from '../schemas/token.js';
import type { Placement, PortMapping, Volume } from '../schemas/service.js';
import { addCertificateCommands } from './certificate-commands.js';
import { addJobCommands } from './job-commands.js';
import { platformVersion } from '../platform-version.js';
import { STORE_SCHEMA_VERSION } from '../store/schema-version.js';

// `platform <client command>`: the CLI side of the orchestrator API.

const client = (command: Command) => {
  const globals = command.optsWithGlobals() as { orchestrator?: string; token?: string };
  return new OrchestratorClient(globals.orchestrator ?? process.env.PLATFORM_ORCHESTRATOR ?? 'http://127.0.0.1:9000', globals.token ?? (process.env.PLATFORM_TOKEN || undefined));
};

function parseEnvAssignments(pairs: string[]): Record<string, string | null> {
  const env: Record<string, string | null> = {};
  for (const pair of pairs) {
    const eq = pair.indexOf('=');
    if (eq < 0) env[pair.replace(/-$/, '')] = null;
    else env[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return env;
}

const print = (text: string) => process.stdout.write(text);

/** A commander parser for whole-number arguments (a stray word must not reach the API as NaN, sent as null). */
const wholeNumber = (value: string): number => {
  if (!/^\d{1,9}$/.test(value)) throw new InvalidArgumentError('a whole number is needed.');
  return Number(value);
};

/** A commander parser for decimal arguments such as CPUs (0.5); the API checks the range. */
const decimalNumber = (value: string): number => {
  if (!/^\d{1,9}(\.\d{1,3})?$/.test(value)) throw new InvalidArgumentError('a number such as 2 or 0.5 is needed.');
  return Number(value);
};

/**
 * `CONTAINER[:HOST]` of --port, repeatable. Commander reads a value name such as
 * `<container[:host]...>` as a single value (its variadic form needs a word before the dots), so
 * the flag collects its repeats itself, as --volume does.
 */
const portFlag = (value: string, previous: PortMapping[] = []): PortMapping[] => {
  const match = /^(\d{1,5})(?::(\d{1,5}))?$/.exec(value);
  if (!match) throw new InvalidArgumentError('CONTAINER or CONTAINER:HOST port numbers are needed, e.g. 8080 or 8080:18080.');
  const container = Number(match[1]);
  return [...previous, match[2] === undefined ? { container } : { container, host: Number(match[2]) }];
};

/** `name:/path` of --volume; the API checks the name and the path. */
const volumeFlag = (value: string, previous: Volume[] = []): Volume[] => {
  const at = value.indexOf(':');
  if (at < 1) throw new InvalidArgumentError('NAME:/path is needed, e.g. data:/var/lib/data.');
  return [...previous, { name: value.slice(0, at), path: value.slice(at + 1) }];
};

interface CreateFlags {
  image: string;
  instances: number;
  description: string;
  port?: PortMapping[];
  env?: string[];
  public?: boolean;
  memory?: number;
  cpus?: number;
  placement?: Placement;
  volume?: Volume[];
  volumeMove?: 'never' | 'allowed';
}

/** The resources, placement and volumes fields of a create from its flags (unset ones left out). */
const unitShapeOf = (options: CreateFlags) => ({
  ...(options.memory !== undefined || options.cpus !== undefined
    ? { resources: { ...(options.memory !== undefined ? { memoryMB: options.memory } : {}), ...(options.cpus !== undefined ? { cpus: options.cpus } : {}) } }
    : {}),
  ...(options.placement ? { placement: options.placement } : {}),
  ...(options.volume ? { volumes: options.volume } : {}),
  ...(options.volumeMove ? { volumeMove: options.volumeMove } : {}),
});

interface FollowFlags {
  detach?: boolean;
  timeout?: number;
}

const duration = (value: string): number => {
  try {
    return parseDuration(value);
  } catch (error) {
    if (error instanceof DurationError) throw new InvalidArgumentError(`${error.message}.`);
    throw error;
  }
};

/** --detach and --timeout of the commands that start a deployment. */
const followFlags = (command: Command): Command =>
  command
    .option('--detach', 'return once the deployment is accepted instead of following it')
    .option('--timeout <duration>', 'stop following after this long (e.g. 90s, 10m); the deployment goes on', duration);

/**
 * Prints what the deploy request answered, then follows the deployment it names until it ends,
 * setting the exit code from its outcome (docs/cli.md "Deploys you can watch").
 */
async function reportDeploy(command: Command, reply: DeployReply, flags: FollowFlags): Promise<void> {
  // An `unchanged` answer's message names its deployment already.
  const deployment = reply.deployment && !reply.message.includes(reply.deployment) ? ` (deployment ${reply.deployment})` : '';
  print(`${reply.message}: ${reply.image}${deployment}\n`);
  if (reply.outcome === 'stale') {
    process.stderr.write('platform: nothing was deployed\n');
    process.exitCode = 1;
    return;
  }
  if (flags.detach) return;
  const orchestrator = client(command);
  const release = await orchestrator.release(reply.service, reply.version);
  process.exitCode = await watchDeployment(
    orchestrator,
    { id: reply.deployment, service: reply.service, release: reply.version, wanted: release.config.numInstances },
    flags.timeout === undefined ? {} : { timeoutMs: flags.timeout },
  );
}

export function addClientCommands(program: Command): void {
  program.option('--orchestrator <url>', 'orchestrator URL for client commands (env PLATFORM_ORCHESTRATOR)');
  program.option('--token <token>', 'API token for client commands (env PLATFORM_TOKEN, preferred: flags show in ps)');
  addTokenCommands(program.command('token').description('Create, list and revoke API tokens (docs/access.md "Access tokens").'));
  addNotifyCommands(program.command('notify').description('Send events to your endpoints: add, list and remove them, see their deliveries (docs/notifications.md).'), client);
  addRegistryCommands(program.command('registry').description('Log in to private registries deploys pull from (docs/deploys.md "Private registries").'));
  addQuotaCommands(program.command('quota').description('Bound what the services a glob matches may reserve together (docs/cluster.md "Quotas").'));
  addCertificateCommands(program.command('cert').description('Add, list and remove the TLS certificates the gateways serve (docs/gateway.md "HTTPS").'), client);

  program.command('services').description('List services.').action(async (_options, command: Command) => {
    const services = await client(command).listServices();
    print(table(['NAME', 'IMAGE', 'UNITS', 'AUTODEPLOY'], services.map((s) => [s.name, s.containerImage, String(s.config.numInstances), s.autoDeploy])));
  });

  program
    .command('create <name>')
    .description('Declare a service.')
    .requiredOption('--image <repository>', 'container repository, e.g. 127.0.0.1:5000/team/web:v1')
    .option('--instances <n>', 'number of units', wholeNumber, 1)
    .option('--description <text>', 'description', '')
    .option('--port <container[:host]>', 'a port units listen on, published on the machine at HOST when given (the API checks the range); repeat for more', portFlag)
    .option('--env <NAME=value...>', 'environment variables')
    .option('--public', 'reachable on the public domain')
    .option('--memory <MB>', 'memory each unit reserves and is limited to, in MB (no swap beyond it)', wholeNumber)
    .option('--cpus <n>', 'CPUs each unit reserves and is limited to, e.g. 0.5', decimalNumber)
    .addOption(new Option('--placement <how>', 'spread: the least used machine (default); binpack: fill one machine before the next').choices(['spread', 'binpack']))
    .option('--volume <name:/path>', 'a named volume per unit (<service>.<instance>.<name>) mounted at /path; repeat for more', volumeFlag)
    .addOption(new Option('--volume-move <when>', 'never (default): a unit whose machine is lost stays, failed, with its data; allowed: it moves with new, empty volumes').choices(['never', 'allowed']))
    .action(async (name: string, options: CreateFlags, command: Command) => {
      const reply = await client(command).createService({
        name,
        description: options.description,
        containerRepository: options.image,
        loadBalanced: true,
        publicFacing: Boolean(options.public),
        numInstances: options.instances,
        ports: options.port ?? [],
        env: Object.fromEntries(Object.entries(parseEnvAssignments(options.env ?? [])).filter((e): e is [string, string] => e[1] !== null)),
        ...unitShapeOf(options),
      });
      print(`created ${reply.meta.name} (${reply.meta.uuid})\n`);
    });

  program
    .command('delete <name>')
    .description("Stop the units of a service and delete it. Its units' volumes stay (a service declared again under the name gets them) unless --volumes.")
    .option('--volumes', "also remove the units' named volumes on every machine")
    .action(async (name: string, options: { volumes?: boolean }, command: Command) => {
      await client(command).deleteService(name, { volumes: Boolean(options.volumes) });
      print(`deleted ${name}${options.volumes ? ' and its volumes' : ''}\n`);
    });

  program
    .command('env <name> <assignments...>')
    .description('Set (NAME=value) or remove (NAME-) environment variables of the next config.')
    .action(async (name: string, assignments: string[], _o, command: Command) => {
      const config = await client(command).patchNextConfig(name, { env: parseEnvAssignments(assignments) });
      print(table(['NAME', 'VALUE'], Object.entries(config.env)));
    });

  followFlags(
    program
      .command('deploy <name>')
      .description('Deploy a service (its image, or --image of the same repository) and follow the deployment until it ends.')
      .option('--image <reference>', 'image reference with a tag'),
  ).action(async (name: string, options: { image?: string } & FollowFlags, command: Command) => {
    await reportDeploy(command, await client(command).deploy(name, options.image), options);
  });

  followFlags(program
    .command('scale <name>')
    .argument('<instances>', 'number of units', wholeNumber)
    .description('Set the number of units in the next config and deploy the next config (with any other change pending in it) on the image the service runs now, following the deployment. The units that stay keep running.'))
    .action(async (name: string, instances: number, options: FollowFlags, command: Command) => {
      const orchestrator = client(command);
      await orchestrator.patchNextConfig(name, { numInstances: instances });
      let reply: DeployReply;
      try {
        // The image it runs now, with the changed config; a service never deployed just keeps the number.
        const running = currentTarget(await orchestrator.deployments(name));
        if (!running) {
          print(`${name} will run ${instances} units from its next deploy (it runs nothing now)\n`);
          return;
        }
        reply = await orchestrator.deploy(name, running.image);
      } catch (error) {
        throw new Error(`numInstances is ${instances} in the next config of ${name}, but deploying it failed: ${(error as Error).message}`, { cause: error });
      }
      await reportDeploy(command, reply, options);
    });

  followFlags(
    program
      .command('rollback <name> <version>')
      .description('Deploy an earlier release (v3, or 3) again, as a new release, and follow the deployment until it ends.')
      .option('--run-release-command', "run the release's releaseCommand again before its units replace the running ones (a rollback does not by default)"),
  ).action(async (name: string, version: string, options: FollowFlags & { runReleaseCommand?: boolean }, command: Command) => {
    await reportDeploy(command, await client(command).rollback(name, version, options.runReleaseCommand === true), options);
  });

  program.command('deployments [service]').description('List deployments, newest first.').action(async (service: string | undefined, _o, command: Command) => {
    const deployments = await client(command).deployments(service);
    print(table(['ID', 'SERVICE', 'RELEASE', 'STATE', 'TRIGGER', 'CREATED', 'REASON'], deployments.map((d) => [d.id, d.service, `v${d.release}`, d.state, d.trigger, d.createdAt, d.reason ?? ''])));
  });

  program
    .command('journal [service]')
    .description('What happened, newest first.')
    .option('--limit <n>', 'entries (at most 500)', wholeNumber, 50)
    .action(async (service: string | undefined, options: { limit: number }, command: Command) => {
      const entries = await client(command).journal(options.limit, service);
      print(table(['AT', 'SERVICE', 'KIND', 'BY', 'MESSAGE'], entries.map((e) => [e.at, e.service ?? '-', e.kind, e.actor?.token ?? '-', e.message])));
    });

  program
    .command('logs <service> [unit]')
    .description("A unit's container output (unit: web-1.service, or just 1), or with --job a job's kept output.")
    .option('--tail <lines>', 'lines from the end', wholeNumber, 100)
    .option('-f, --follow', 'keep printing new output')
    .option('--previous', "the last output kept of the unit's newest failed container, after a line naming its deployment, release and how it ended")
    .option('--job <id>', "a job's output (`platform jobs` lists them): its last lines as kept, at most 1000; with -f until it ends")
    .action(async (service: string, unit: string | undefined, options: { tail: number; follow?: boolean; previous?: boolean; job?: string }, command: Command) => {
      const follow = Boolean(options.follow);
      let body;
      if (options.job !== undefined) body = await client(command).jobOutput(service, options.job, { tail: Math.min(options.tail, 1000), follow });
      else if (unit === undefined) throw new InvalidArgumentError('name a unit (web-1.service, or 1), or a job with --job ID.');
      else {
        const name = /^\d+$/.test(unit) ? `${service}-${unit}.service` : unit;
        body = await client(command).logs(service, name, { tail: options.tail, follow, ...(options.previous ? { previous: true } : {}) });
      }
      try {
        await pipeline(body, process.stdout, { end: false });
        // A followed log ends only when the server ends it: say so, or it reads like a quiet unit.
        if (options.follow && options.job === undefined) process.stderr.write("platform: the followed log ended (the unit's container stopped, or the token that opened it was revoked or expired)\n");
      } catch (error) {
        // A reader that stopped early (`| head`) is not an error.
        if ((error as NodeJS.ErrnoException).code !== 'EPIPE') throw error;
      }
    });

  addJobCommands(program, client);

  program.command('units [service]').description('List units like fleetctl list-units.').action(async (service: string | undefined, _o, command: Command) => {
    const units = await client(command).units(service);
    print(table(['UNIT', 'MACHINE', 'ACTIVE', 'SUB', 'RELEASE', 'ADDRESS'], units.map((u) => [u.unit, u.machine, u.active, u.sub, `v${u.release}`, u.address ?? '-'])));
  });

  program
    .command('status')
    .description('The cluster on one screen: services, machines and the newest deployments.')
    .option('-w, --watch', 'redraw it as the cluster changes, until Ctrl-C')
    .action(async (options: { watch?: boolean }, command: Command) => {
      await watchStatus(client(command), Boolean(options.watch));
    });

  program
    .command('version')
    .description('Print the version of this program, then the store schema version and every running component with its version (docs/upgrades.md).')
    .option('--client', "only this program's version, without asking the orchestrator")
    .action(async (options: { client?: boolean }, command: Command) => {
      print(`platform ${platformVersion} (this client; store schema ${STORE_SCHEMA_VERSION})\n`);
      if (options.client) return;
      const { storeSchema, components } = await client(command).versions();
      print(`store schema ${storeSchema}\n`);
      print(table(['ROLE', 'MACHINE', 'ADDRESS', 'VERSION', 'STARTED'], components.map((c) => [c.role, c.machine, c.address, c.version, c.startedAt])));
    });

  program.command('machines').description('List machines: their engine, units assigned of the most they take (the agent\'s --max-units), memory and CPUs for units, and drains.').action(async (_o, command: Command) => {
    const machines = await client(command).machines();
    print(
      table(
        ['MACHINE', 'ADDRESS', 'DOCKER', 'UNITS', 'MEMORY', 'CPUS', 'DRAIN'],
        machines.map((m) => [
          m.id,
          m.address,
          engineColumn(m.docker),
          `${m.unitCount}/${m.capacity.units}`,
          m.capacity.memoryMB === undefined ? '-' : `${m.capacity.memoryMB} MB`,
          m.capacity.cpus === undefined ? '-' : String(m.capacity.cpus),
          m.drain ? `since ${m.drain.since}` : '-',
        ]),
      ),
    );
  });

  program
    .command('drain <machine>')
    .description('Drain a machine: no new units go there, and its units move to other machines (each replacement starts first).')
    .option('--reason <text>', 'why, shown in the machine listing')
    .action(async (machine: string, options: { reason?: string }, command: Command) => {
      const drain = await client(command).drain(machine, options.reason);
      print(`draining ${drain.machine} since ${drain.since}; its units are moving (see: platform units)\n`);
    });

  program
    .command('undrain <machine>')
    .description('Stop draining a machine: new units may be placed on it again.')
    .action(async (machine: string, _o, command: Command) => {
      await client(command).undrain(machine);
      print(`${machine} takes new units again\n`);
    });
}

function addTokenCommands(token: Command): void {
  token
    .command('create <name>')
    .description('Create a token and print its secret, this once.')
    .addOption(new Option('--role <role>', 'what it may do').choices(['read', 'deploy', 'admin']).makeOptionMandatory())
    .option('--services <glob>', 'deploy tokens: only services matching this glob (e.g. web-*)')
    .option('--expires <duration>', 'expire after this long (e.g. 90d, 12h, 1w2d); default never')
    .action(async (name: string, options: { role: TokenRole; services?: string; expires?: string }, command: Command) => {
      const reply = await client(command).createToken({
        name,
        role: options.role,
        ...(options.services ? { services: options.services } : {}),
        ...(options.expires ? { expiresIn: options.expires } : {}),
      });
      print(`${reply.secret}\n`);
      process.stderr.write(`token ${name} (${describeToken(reply.token)}): the secret above is shown only now\n`);
    });

  token
    .command('bootstrap')
    .description('Create the first admin token and print its secret; works only while no token was ever issued.')
    .action(async (_o, command: Command) => {
      const reply = await client(command).bootstrapToken();
      print(`${reply.secret}\n`);
      process.stderr.write(`token ${reply.token.name} (admin): the secret above is shown only now\n`);
    });

  token.command('list').description('List tokens (never their secrets).').action(async (_o, command: Command) => {
    const tokens = await client(command).listTokens();
    print(table(['NAME', 'ROLE', 'SERVICES', 'CREATED', 'LAST USED', 'EXPIRES'], tokens.map((t) => [t.name, t.role, t.services ?? '*', t.createdAt, t.lastUsedAt ?? '-', t.expiresAt ?? 'never'])));
  });

  token.command('revoke <name>').description('Revoke a token: every role refuses it at once.').action(async (name: string, _o, command: Command) => {
    await client(command).revokeToken(name);
    print(`revoked ${name}\n`);
  });
}

/** The password as piped in: one line (a trailing newline, as `echo` or a file gives, is not part of it). */
async function passwordFromStdin(): Promise<string> {
  if (process.stdin.isTTY) throw new Error('--password-stdin reads the password from standard input: pipe it in (e.g. platform registry login HOST --username U --password-stdin < file)');
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  const password = Buffer.concat(chunks).toString('utf8').replace(/\r?\n$/, '');
  if (!password) throw new Error('--password-stdin: standard input held no password');
  return password;
}

function addRegistryCommands(registry: Command): void {
  registry
    .command('login <host>')
    .description('Store the user name and password deploys use for a registry (host or host:port); the scheduler resolves tags and agents pull with them.')
    .requiredOption('--username <user>', 'user name at the registry')
    .requiredOption('--password-stdin', 'read the password from standard input (never a flag: flags show in ps)')
    .action(async (host: string, options: { username: string }, command: Command) => {
      const login = await client(command).registryLogin(host, options.username, await passwordFromStdin());
      print(`logged in to ${login.host} as ${login.username}\n`);
    });

  registry.command('list').description('List registry logins: hosts, users and when they were added (never a password).').action(async (_o, command: Command) => {
    const logins = await client(command).registryLogins();
    print(table(['REGISTRY', 'USERNAME', 'ADDED'], logins.map((l) => [l.host, l.username, l.addedAt])));
  });

  registry.command('logout <host>').description("Forget a registry's login.").action(async (host: string, _o, command: Command) => {
    await client(command).registryLogout(host);
    print(`logged out of ${host}\n`);
  });
}

/** Memory as `--memory` takes it: megabytes, or a number with m or g (4g = 4096 MB). */
const memoryMegabytes = (value: string): number => {
  const match = /^(\d{1,9})([mg]?)$/i.exec(value.trim());
  if (!match) throw new InvalidArgumentError('megabytes, or a number with m or g such as 4g, is needed.');
  return Number(match[1]) * (match[2]?.toLowerCase() === 'g' ? 1024 : 1);
};

function addQuotaCommands(quota: Command): void {
  quota
    .command('set <services>')
    .description("Bound the units, memory and CPUs the services matching the glob (e.g. 'team-a-*') may reserve together; replaces the glob's quota.")
    .option('--units <n>', 'units of all matching services together', wholeNumber)
    .option('--memory <size>', 'memory their units declare together: MB, or e.g. 4g', memoryMegabytes)
    .option('--cpus <n>', 'CPUs their units declare together', decimalNumber)
    .action(async (services: string, options: { units?: number; memory?: number; cpus?: number }, command: Command) => {
      const limits = { units: options.units, memoryMB: options.memory, cpus: options.cpus };
      const set = await client(command).setQuota(services, Object.fromEntries(Object.entries(limits).filter(([, limit]) => limit !== undefined)));
      print(`quota ${set.services}: ${describeQuota(set)}\n`);
    });

  quota.command('list').description('List quotas: globs and their limits.').action(async (_o, command: Command) => {
    const quotas = await client(command).quotas();
    print(table(['SERVICES', 'UNITS', 'MEMORY MB', 'CPUS', 'SET'], quotas.map((q) => [q.services, String(q.units ?? '-'), String(q.memoryMB ?? '-'), String(q.cpus ?? '-'), q.setAt])));
  });

  quota.command('remove <services>').description("Remove the glob's quota.").action(async (services: string, _o, command: Command) => {
    await client(command).removeQuota(services);
    print(`removed the quota of ${services}\n`);
  });
}

const describeQuota = (quota: { units?: number; memoryMB?: number; cpus?: number }): string =>
  [quota.units === undefined ? '' : `${quota.units} units`, quota.memoryMB === undefined ? '' : `${quota.memoryMB} MB`, quota.cpus === undefined ? '' : `${quota.cpus} CPUs`]
    .filter(Boolean)
    .join(', ');

const describeToken = (token: Token): string =>
  [token.role, token.services ? `services ${token.services}` : '', token.expiresAt ? `expires ${token.expiresAt}` : ''].filter(Boolean).join(', ');
