import { Command, Option } from 'commander';
import type { RawFlags } from './config.js';
import { ConfigError } from './config-error.js';
import type { AnnounceFlags } from './announce.js';
import { FAILED_PROBES_TO_WITHDRAW } from './announce-sidekick.js';

// The one `platform` binary: serve roles, run everything (`up`), announce, render systemd units, and the API client.
// Each command loads what it runs when it runs: a client command reads no server module (issue 31:
// `platform services` spent about 0.7 s of CPU loading the servers' dependencies).

/** How a process reaches etcd; every role and `platform announce` take these (docs/security.md "Securing etcd"). */
function addEtcdFlags(command: Command): Command {
  return command
    .option('--etcd <urls>', 'etcd client URLs, comma-separated (env PLATFORM_ETCD); roles without it use the embedded store')
    .option('--etcd-ca <file>', 'PEM CA that signed etcd\'s certificate, for https:// URLs (env PLATFORM_ETCD_CA; default: the system\'s CAs)')
    .option('--etcd-cert <file>', 'PEM client certificate for an etcd with --client-cert-auth (env PLATFORM_ETCD_CERT)')
    .option('--etcd-key <file>', 'PEM private key of --etcd-cert (env PLATFORM_ETCD_KEY)')
    .option('--etcd-user <name>', 'etcd user, when etcd has authentication enabled (env PLATFORM_ETCD_USER)')
    .option('--etcd-password-file <file>', 'file holding the etcd user\'s password (env PLATFORM_ETCD_PASSWORD_FILE)')
    .option('--etcd-password <password>', 'the etcd user\'s password; prefer env PLATFORM_ETCD_PASSWORD or --etcd-password-file: flags show in ps');
}

function addServeFlags(command: Command): Command {
  return addEtcdFlags(command)
    .option('--host <host>', 'address to listen on (env PLATFORM_HOST; default 127.0.0.1)')
    .option('--port <port>', 'port to listen on (a single role only; defaults: orchestrator 9000, directory 9001, scheduler 9002, agent 9003, gateway 8080, web 9004)')
    .option('--ports <role=port,...>', 'roles moved off their default ports, comma-separated, e.g. orchestrator=9100,gateway=8088 (env PLATFORM_PORTS); the gateway\'s internal listener follows it (its port + 1) unless --internal-port')
    .option('--advertise <host[:port]>', 'address other roles reach this one at (env PLATFORM_ADVERTISE; default: --host)')
    .option('--data-dir <dir>', 'embedded store directory (env PLATFORM_DATA_DIR)', undefined)
    .option('--domain <domain>', 'domain services are reached under (env PLATFORM_DOMAIN)', undefined)
    .option('--announce-ttl <seconds>', 'TTL of announcement and machine leases (env PLATFORM_ANNOUNCE_TTL; default 10)', undefined)
    .option('--metrics-interval <seconds>', "resolution of the dashboard's graphs: gateways count requests and agents read their units' CPU and memory per interval, and keep an hour (env PLATFORM_METRICS_INTERVAL; default 10)")
    .option('--no-announce', 'do not write /platform/services/<name>: a platform announce sidekick does (env PLATFORM_ANNOUNCE=false)')
    .option('--log-level <level>', 'trace, debug, info, warn, error (env PLATFORM_LOG_LEVEL)')
    .option('--log-format <format>', 'pretty (readable lines; the default on a terminal) or json (one object a line; the default otherwise) (env PLATFORM_LOG_FORMAT)')
    .option('--auth <mode>', 'auto (calls from this machine on a loopback listener need no token; the default), token (every call needs one) or none (env PLATFORM_AUTH)')
    .option('--cors-origin <urls>', 'origins whose pages may call the APIs from a browser, comma-separated (env PLATFORM_CORS_ORIGIN); none by default')
    .option('--allowed-host <names>', 'Host names the APIs answer besides their listen and advertise addresses and localhost, comma-separated; .example.com takes its subdomains too (env PLATFORM_ALLOWED_HOSTS); others get 421')
    .addOption(new Option('--network <mode>', 'agent: how units are networked (default bridge; platform up: host when the engine has no bridge network)').choices(['bridge', 'host']))
    .option('--machine-id <id>', 'agent: machine id (default /etc/machine-id)')
    .option('--unit-host <host>', 'agent: host units are reached at (env PLATFORM_UNIT_HOST; default 127.0.0.1)', undefined)
    .option('--default-memory-limit <mb>', 'agent: memory limit of a unit declared without one, in MB; 0: none (env PLATFORM_DEFAULT_MEMORY_LIMIT; default 1024)')
    .option('--host-network-user <uid[:gid]>', 'agent: user units on host networking run as (env PLATFORM_HOST_NETWORK_USER; default 65534:65534, nobody; 0:0 is root)', undefined)
    .option('--stop-grace <seconds>', 'agent: seconds between SIGTERM and SIGKILL when a unit stops (services may set their own)')
    .option('--drain-seconds <seconds>', 'agent: seconds a unit is marked draining (deactivating) before it is stopped (default 2)')
    .option('--label <key=value...>', 'agent: machine labels')
    .option('--log-max-size <size>', "agent: a unit container's output file is rotated at this size, e.g. 10m (k, m, g; env PLATFORM_LOG_MAX_SIZE; default 10m)")
    .option('--log-max-files <n>', "agent: output files kept per unit container, the current one included (env PLATFORM_LOG_MAX_FILES; default 3)")
    .option('--max-units <n>', 'agent: most units this machine takes, a positive integer (env PLATFORM_MAX_UNITS; default 100)')
    .option('--reserve-memory <MB>', 'agent: memory held back from the engine\'s total for the agent, the engine and the system; units get the rest (default 512)')
    .option('--reserve-cpus <n>', 'agent: CPUs held back from the engine\'s count (default 0)')
    .option('--capacity-memory <MB>', 'agent: report this much memory for units instead of the engine\'s total less the reserve (to cap a machine)')
    .option('--capacity-cpus <n>', 'agent: report this many CPUs for units instead of the engine\'s count less the reserve (to cap a machine)')
    .option('--insecure-registry <host:port...>', 'scheduler: registries reached over plain HTTP (loopback ones always are)')
    .option('--allowed-registry <host...>', 'scheduler: registries on loopback, private or link-local addresses deploys may use: host, host:port or a range such as 10.0.0.0/8 (env PLATFORM_ALLOWED_REGISTRIES, comma-separated); public ones always may')
    .option(
      '--allowed-notification-destination <host...>',
      'orchestrator and scheduler: notification endpoints on loopback, private or link-local addresses that may be added and delivered to, ' +
        'as for --allowed-registry (env PLATFORM_ALLOWED_NOTIFICATION_DESTINATIONS, comma-separated); public ones always may',
    )
    .option('--registry-webhook-token <token>', 'scheduler: bearer token POST /hooks/registry requires (env PLATFORM_REGISTRY_WEBHOOK_TOKEN, preferred: flags show in ps)')
    .option('--dockerhub-webhook-token <token>', 'scheduler: ?token= POST /hooks/dockerhub requires (env PLATFORM_DOCKERHUB_WEBHOOK_TOKEN)')
    .option('--github-webhook-secret <secret>', 'scheduler: HMAC secret of POST /hooks/github (env PLATFORM_GITHUB_WEBHOOK_SECRET)')
    .option('--keep-deployments <n>', 'scheduler: finished deployments kept per service, older ones deleted (default 50)')
    .option('--keep-journal <n>', 'scheduler: journal entries kept, older ones deleted (default 10000)')
    .option('--engine-grace <seconds>', 'scheduler: how long a machine may have no Docker engine before its units move elsewhere (default 30; env PLATFORM_ENGINE_GRACE)')
    .option('--machine-grace <duration>', 'scheduler: how long a machine whose agent stopped on purpose (a restart, a reboot) keeps its units before they move elsewhere (env PLATFORM_MACHINE_GRACE; default 5m)')
    .option('--backup-dir <dir>', 'scheduler: where the leader writes backups: a verified one every --backup-interval when this is given, and the one it takes before migrating the store\'s schema (default <data-dir>/backups); an absolute path, created 0700 (env PLATFORM_BACKUP_DIR)')
    .option('--backup-interval <duration>', 'scheduler: time between scheduled backups, such as 6h; at least 5s (env PLATFORM_BACKUP_INTERVAL; default 1h)')
    .option('--backup-keep <n>', 'scheduler: scheduled backups kept in --backup-dir, the newest; older ones are deleted after a new one verified (env PLATFORM_BACKUP_KEEP; default 48)')
    .option('--keep-releases <n>', 'scheduler: releases kept per service, older ones deleted (default 50; rollback reaches only kept ones)')
    .option('--notify-retry <duration>', 'scheduler: wait before the first retry of a failed notification, doubling (with jitter) up to 1h (default 10s)')
    .option('--notify-give-up <duration>', 'scheduler: a notification not delivered within this is given up (default 24h)')
    .option('--notify-timeout <seconds>', 'scheduler: how long one notification attempt may take (default 10)')
    .option('--directory-url <url>', 'orchestrator: fixed service-directory URL instead of the store lookup')
    .option('--scheduler-url <url>', 'orchestrator: fixed scheduler URL instead of the store lookup')
    .option('--orchestrator-url <url>', 'web: fixed orchestrator URL instead of the store lookup')
    .option('--internal-domain <domain>', 'gateway: domain every load-balanced service is reached under (env PLATFORM_INTERNAL_DOMAIN, default platform.internal)')
    .option('--expose-components', 'gateway: route orchestrator.<domain> and web.<domain> (and the directory and scheduler on the internal domain) to the announced components')
    .option('--request-timeout <seconds>', 'gateway: 504 when a unit sends no response headers within this (default 60)')
    .option('--idle-timeout <seconds>', 'gateway: close idle client connections and silent response bodies after this (default 60)')
    .option('--max-header-size <bytes>', 'gateway: largest request head accepted, 431 above (default 16384)')
    .option('--upstream-connections <n>', 'gateway: most connections to one unit (default 128)')
    .option('--https-port <port>', 'gateway: HTTPS listener port, or off (env PLATFORM_HTTPS_PORT; default 8443)')
    .option('--https-redirect', 'gateway: answer plain-HTTP requests for public hosts with 308 to HTTPS')
    .option('--hsts-max-age <seconds>', 'gateway: send Strict-Transport-Security with this max-age on HTTPS answers for public hosts (off by default)')
    .option('--acme-email <email>', 'gateway: turn ACME on; the account contact (env PLATFORM_ACME_EMAIL)')
    .option('--acme-directory <url>', "gateway: ACME directory (env PLATFORM_ACME_DIRECTORY; default Let's Encrypt production)")
    .option('--acme-ca-file <file>', "gateway: PEM CA certificates to trust for the ACME server's HTTPS (a private ACME server)")
    .option('--data-plane <plane>', 'gateway: haproxy, node or auto (env PLATFORM_GATEWAY_DATA_PLANE; default auto: HAProxy when an haproxy of 2.6 or later is found)')
    .option('--internal-host <address>', 'gateway: with a --host that is not loopback, the internal domain is served only here (env PLATFORM_GATEWAY_INTERNAL_HOST, default 127.0.0.1)')
    .option('--internal-port <port>', 'gateway: the port of that internal listener (env PLATFORM_GATEWAY_INTERNAL_PORT, default the gateway port + 1)')
    .option('--haproxy-bin <path>', 'gateway: the haproxy executable (env PLATFORM_HAPROXY_BIN; default haproxy on the PATH)')
    .option('--headers-timeout <seconds>', 'a request head must arrive within this, 408 and closed after (default 10)')
    .option('--body-timeout <seconds>', 'a whole request, head and body, must arrive within this, 408 and closed after (default 30; gateway 300)')
    .option('--max-connections <n>', 'connections one role server holds at once; more are answered 503 (default 2048)')
    .option('--write-budget <size>', 'directory, scheduler: what one token\'s calls may make the store keep per --write-budget-window, 429 above (env PLATFORM_WRITE_BUDGET; default 64m)')
    .option('--write-budget-window <duration>', 'directory, scheduler: the window of --write-budget, refilled evenly (env PLATFORM_WRITE_BUDGET_WINDOW; default 1h)')
    .option('--store-space-limit <size>', 'directory, scheduler: store size above which API writes get 507; keep it below etcd\'s --quota-backend-bytes (env PLATFORM_STORE_SPACE_LIMIT; default 1536m)')
    .option('--default-unit-memory <MB>', 'directory: memory limit (and reservation) given to units of services declared without resources.memoryMB (env PLATFORM_DEFAULT_UNIT_MEMORY; default none)')
    .option('--max-connections-per-address <n>', 'connections one client address holds to one role server at once; more are answered 503 (default 256)');
}

const program = new Command('platform').description('A self-hosted container platform.').showHelpAfterError();

addServeFlags(program.command('serve').description('Run one or more roles in this process.'))
  .requiredOption('--role <roles>', 'comma-separated: directory, scheduler, orchestrator, agent, gateway, web')
  .action(async (flags: RawFlags) => (await import('./serve.js')).serve(flags, false));

addServeFlags(program.command('up').description('Run every role in one process on the default ports, with the embedded store (or --etcd) and the local Docker engine.'))
  .action(async (flags: RawFlags) => (await import('./serve.js')).serve({ ...flags, role: undefined }, true));

addEtcdFlags(
  program
    .command('announce')
    .description('Keep host:port announced for a component under a TTL lease while it answers there (a <component>-announce.service sidekick; run the component with --no-announce).'),
)
  .requiredOption('--role <component>', 'service-directory, scheduler (announced only while it leads), orchestrator, gateway or web')
  .requiredOption('--address <host:port>', 'where the component answers: announced, and probed on /healthz (the scheduler on /readyz)')
  .option('--announce-ttl <seconds>', 'lease TTL (env PLATFORM_ANNOUNCE_TTL; default 10)')
  .option('--check-interval <seconds>', `seconds between probes, at most a third of the TTL; withdrawn after ${FAILED_PROBES_TO_WITHDRAW} failed probes (default 2, or a quarter of a TTL under 8)`)
  .action(async (flags: AnnounceFlags) => (await import('./announce.js')).runAnnounce(flags));

// A process that serves (serve, up, announce) runs for days: the client commands, the unit-file
// renderer and the backup commands, with the HTTP client they load (undici), would sit in its
// memory unused (issue 29: every role's idle RSS). The other commands, and `platform --help`, get them all.
const LONG_RUNNING = new Set(['serve', 'up', 'announce']);
const subcommand = process.argv.slice(2).find((argument) => !argument.startsWith('-'));
if (!LONG_RUNNING.has(subcommand ?? '')) {
  const [{ addUnitsCommands }, { addBackupCommands }, { addClientCommands }] = await Promise.all([
    import('./systemd/units-command.js'),
    import('./backup/backup-command.js'),
    import('./client/commands.js'),
  ]);
  addUnitsCommands(program);
  addBackupCommands(program, addEtcdFlags);
  addClientCommands(program);
}

program.parseAsync(process.argv).catch((error: unknown) => {
  if (error instanceof ConfigError) {
    process.stderr.write(`platform: ${error.message}\n`);
    process.exit(2);
  }
  process.stderr.write(`platform: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
