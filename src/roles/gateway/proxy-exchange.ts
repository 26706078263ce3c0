import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import { chooseUpstream } from './upstream-choice.js';
import { clientResponseHeaders } from './forwarded-headers.js';
import { sendError } from './gateway-error.js';
import type { Route } from './route-table.js';
import type { Upstream } from './upstream.js';

// One request through the gateway: dispatched on the chosen unit's pool with undici's handler
// interface (no intermediate streams or promises), the response streamed back with back-pressure.
// A connection failure before any response byte is retried once on another unit when the method
// is idempotent and no request body byte was read; after that the client gets 502 or 504.

export interface ExchangeSettings {
  requestTimeoutMs: number;
  idleTimeoutMs: number;
}

const idempotent = new Set(['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE']);

/** A unit that refused a connection is avoided this long (unless it is the only one left). */
const AVOID_MS = 2_000;

type FailureReason = 'connect' | 'reset' | 'timeout' | 'other';

const connectCodes = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL', 'UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_CLOSED', 'UND_ERR_DESTROYED']);
const resetCodes = new Set(['ECONNRESET', 'EPIPE', 'UND_ERR_SOCKET']);

function failureReason(error: Error): FailureReason {
  const code = (error as { code?: string }).code ?? '';
  if (connectCodes.has(code)) return 'connect';
  if (resetCodes.has(code)) return 'reset';
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') return 'timeout';
  return 'other';
}

export class ProxyExchange implements Dispatcher.DispatchHandler {
  private upstream: Upstream | undefined;
  /** The upstream whose in-flight count this request holds, until it completes or fails. */
  private holding: Upstream | undefined;
  private attempts = 0;
  private abortUpstream: ((error?: Error) => void) | undefined;
  private resumeUpstream: (() => void) | undefined;
  /** The response status once its head went to the client (0 before). */
  private status = 0;
  private clientGone = false;
  private readonly startedAt = performance.now();

  constructor(
    private readonly settings: ExchangeSettings,
    private readonly route: Route,
    private readonly req: IncomingMessage,
    private readonly res: ServerResponse,
    private readonly headers: string[],
    private readonly body: IncomingMessage | null,
  ) {
    res.once('close', this.onClientClose);
  }

  send(upstream: Upstream): void {
    this.upstream = upstream;
    this.attempts += 1;
    this.holding = upstream;
    upstream.inFlight += 1;
    upstream.pool.dispatch(
      {
        path: this.req.url!,
        method: this.req.method as Dispatcher.HttpMethod,
        headers: this.headers,
        body: this.body,
        headersTimeout: this.settings.requestTimeoutMs,
        bodyTimeout: this.settings.idleTimeoutMs,
      },
      this,
    );
  }

  onConnect(abort: (error?: Error) => void): void {
    this.abortUpstream = abort;
    if (this.clientGone) abort(new Error('the client went away'));
  }

  onHeaders(status: number, rawHeaders: Buffer[], resume: () => void, statusText: string): boolean {
    if (status < 200) return true; // 1xx: Node answered Expect: 100-continue itself
    try {
      this.res.writeHead(status, statusText || undefined, clientResponseHeaders(rawHeaders));
    } catch (error) {
      // A header Node refuses to send (an invalid character): the client gets 502 instead.
      this.abortUpstream?.(error as Error);
      return false;
    }
    this.status = status;
    this.resumeUpstream = resume;
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.res.write(chunk)) return true;
    this.res.once('drain', this.resumeUpstream!);
    return false;
  }

  onComplete(): void {
    this.release();
    this.route.metrics.answered(this.status, this.elapsedSeconds());
    this.res.end();
  }

  onError(error: Error): void {
    this.release();
    if (this.clientGone) return;
    const reason = failureReason(error);
    this.route.metrics.upstreamError(reason);
    if (this.status !== 0) {
      // The response had begun: the client sees a truncated response rather than a wrong one.
      this.res.destroy(error);
      return;
    }
    if (reason === 'connect') this.upstream!.avoidUntil = Date.now() + AVOID_MS;
    if (this.retry(reason)) return;
    const unit = this.upstream!.unit;
    const status = reason === 'timeout' ? 504 : 502;
    const message =
      reason === 'timeout'
        ? `${unit} of ${this.route.name} sent no response within ${this.settings.requestTimeoutMs / 1000} s`
        : `${unit} of ${this.route.name} could not be reached: ${error.message}`;
    this.route.metrics.answered(status, this.elapsedSeconds());
    sendError(this.req, this.res, { status, message });
  }

  private elapsedSeconds(): number {
    return (performance.now() - this.startedAt) / 1000;
  }

  /** Once, on another unit, for an idempotent request that has sent no body byte and got no answer. */
  private retry(reason: FailureReason): boolean {
    if (this.attempts > 1 || (reason !== 'connect' && reason !== 'reset')) return false;
    if (!idempotent.has(this.req.method!)) return false;
    if (this.body !== null && (reason !== 'connect' || this.body.readableDidRead)) return false;
    const upstreams = this.route.upstreams;
    const index = chooseUpstream(upstreams, this.route.cursor, Date.now(), this.upstream);
    // The same unit again only for a reset (a keep-alive connection it closed); a refusal would repeat.
    if (index === -1 || (upstreams[index] === this.upstream && reason === 'connect')) return false;
    this.route.cursor = index + 1;
    this.route.metrics.retried();
    this.send(upstreams[index]!);
    return true;
  }

  private release(): void {
    if (this.holding === undefined) return;
    this.holding.inFlight -= 1;
    this.holding = undefined;
  }

  private readonly onClientClose = (): void => {
    if (this.res.writableFinished) return;
    this.clientGone = true;
    this.abortUpstream?.(new Error('the client went away'));
  };
}
