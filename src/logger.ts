import { pino, type Logger } from 'pino';
import pretty from 'pino-pretty';
import type { PlatformConfig } from './config.js';

// The process's logger. On a terminal people read it: one line per entry with the time, the
// level, the role and the message, then the entry's other fields (`key=value` as JSON, on the
// same line). Elsewhere (a file, a pipe, journald, a log collector) and with --log-format json
// every entry stays one JSON object, which machines read.

export function createLogger(config: Pick<PlatformConfig, 'logLevel' | 'logFormat'>): Logger {
  if (config.logFormat === 'json') return pino({ level: config.logLevel });
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
