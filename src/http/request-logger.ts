import type { FastifyBaseLogger, FastifyLogFn, LogLevel } from 'fastify';
import type { Bindings, ChildLoggerOptions } from 'pino';

// Fastify gives every request a child of the server's logger (request.log, reply.log) carrying
// its request id. A pino child serialises its bindings when it is made, and a role logs nothing
// for most requests (per-request lines are off: src/http/server.ts), so the directory's reads
// paid for a logger on every call and used it on almost none (issue 29). Each request now gets a
// stand-in that makes the same child, with the same bindings and options, on the first line it
// logs (a refused call's `request rejected`, an error): the lines are the same, request id included.

const LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

class RequestLogger implements FastifyBaseLogger {
  // Set on the prototype below.
  declare fatal: FastifyLogFn;
  declare error: FastifyLogFn;
  declare warn: FastifyLogFn;
  declare info: FastifyLogFn;
  declare debug: FastifyLogFn;
  declare trace: FastifyLogFn;
  declare silent: FastifyLogFn;

  private made: FastifyBaseLogger | undefined;

  constructor(
    private readonly parent: FastifyBaseLogger,
    private readonly bindings: Bindings,
    private readonly options: ChildLoggerOptions,
  ) {}

  /** The child Fastify would have made for the request, made once. */
  logger(): FastifyBaseLogger {
    return (this.made ??= this.parent.child(this.bindings, this.options));
  }

  get level(): LogLevel {
    return (this.made?.level ?? this.options.level ?? this.parent.level) as LogLevel;
  }

  set level(level: LogLevel) {
    this.logger().level = level;
  }

  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.logger().child(bindings, options);
  }
}

// The log methods on the prototype, not per instance: a stand-in costs one small object per request.
for (const level of LEVELS) {
  const log = function (this: RequestLogger, ...args: unknown[]): void {
    const logger = this.logger();
    (logger[level] as (...args: unknown[]) => void).apply(logger, args);
  };
  Object.defineProperty(RequestLogger.prototype, level, { value: log as FastifyLogFn, writable: true, configurable: true });
}

/** Fastify's `childLoggerFactory`: a request's logger, its pino child made on its first line. */
export const lazyRequestLogger = (logger: FastifyBaseLogger, bindings: Bindings, options: ChildLoggerOptions): FastifyBaseLogger =>
  new RequestLogger(logger, bindings, options);
