import { createRequire } from 'node:module';
import { pino, type Logger } from 'pino';
import type PinoPretty from 'pino-pretty';
import type { PlatformConfig } from './config.js';

// The process's logger. On a terminal people read it: one line per entry with the time, the
// level, the role and the message, then the entry's other fields (`key=value` as JSON, on the
// same line). Elsewhere (a file, a pipe, journald, a log collector) and with --log-format json
// every entry stays one JSON object, which machines read.

// pino-pretty and what it loads (colorette, dateformat, fast-copy…) only where lines are pretty:
// a role under systemd or in a container logs JSON and never needs them (issue 29: idle memory).
// Loaded with require so that createLogger stays synchronous (pino-pretty is a CommonJS module).
const loadPretty = (): typeof PinoPretty => createRequire(import.meta.url)('pino-pretty') as typeof PinoPretty;

export function createLogger(config: Pick<PlatformConfig, 'logLevel' | 'logFormat'>): Logger {
  if (config.logFormat === 'json') return pino({ level: config.logLevel });
  const pretty = loadPretty();
  return pino(
    { level: config.logLevel },
    pretty({
      colorize: Boolean(process.stdout.isTTY),
      translateTime: 'SYS:HH:MM:ss.l',
      ignore: 'pid,hostname,role',
      messageFormat: '{if role}{role}: {end}{msg}',
      singleLine: true,
      // Synchronous, like pino's own stdout: the last lines before an exit are not lost.
      sync: true,
    }),
  );
}

/**
 * Node's DEP0123, "Setting the TLS ServerName to an IP address is not permitted by RFC 6066": the
 * etcd client's gRPC library (@grpc/grpc-js 1.14) sets the TLS server name to the host of each
 * member URL, an IP address in the README's install, and offers no option to leave it out for
 * addresses (grpc/grpc-node#1919). Node ignores such a name for SNI and still checks the
 * certificate against the address; nothing for an operator to do, so it is logged at debug level.
 */
const IP_SERVERNAME_DEPRECATION = 'DEP0123';

/**
 * Process warnings (Node's deprecations, the store's `process.emitWarning`s) as entries of `log`
 * instead of the plain-text lines Node prints to stderr by default, which broke the JSON of a
 * role's journal (issue 30, defect 5). Every warning is still logged, at warn level, except the
 * known DEP0123 of TLS to etcd at IP addresses, at debug.
 */
export function logProcessWarnings(log: Logger): void {
  // Node's own printer is a 'warning' listener installed at startup (unless --no-warnings).
  process.removeAllListeners('warning');
  process.on('warning', (warning: Error & { code?: string }) => {
    const entry = { warning: { name: warning.name, ...(warning.code ? { code: warning.code } : {}) } };
    if (warning.code === IP_SERVERNAME_DEPRECATION) log.debug(entry, warning.message);
    else log.warn(entry, warning.message);
  });
}
