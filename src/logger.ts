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
