import { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';

// The gateway's own answers (unknown host, no healthy unit, unit unreachable or too slow):
// `{statusCode, error, message}` as every platform API answers, or a small page for a browser.

export interface GatewayError {
  status: number;
  message: string;
  /** Seconds, for 503: when trying again is worth it. */
  retryAfter?: number;
}

const escapeHtml = (text: string): string =>
  text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

/** The answer's content type and body (also written as files for the HAProxy data plane). */
export function renderError(error: GatewayError, wantsHtml: boolean): { type: string; body: string } {
  const name = STATUS_CODES[error.status] ?? 'Error';
  if (wantsHtml) {
    const title = `${error.status} ${escapeHtml(name)}`;
    return {
      type: 'text/html; charset=utf-8',
      body: `<!doctype html><html><head><title>${title}</title></head><body><h1>${title}</h1><p>${escapeHtml(error.message)}</p><hr><p>platform gateway</p></body></html>\n`,
    };
  }
  return { type: 'application/json; charset=utf-8', body: `${JSON.stringify({ statusCode: error.status, error: name, message: error.message })}\n` };
}

const errorHeaders = (error: GatewayError, type: string, length: number): Record<string, string | number> => ({
  'content-type': type,
  'content-length': length,
  'cache-control': 'no-store',
  ...(error.retryAfter === undefined ? {} : { 'retry-after': error.retryAfter }),
});

export function sendError(req: IncomingMessage, res: ServerResponse, error: GatewayError): void {
  const { type, body } = renderError(error, (req.headers.accept ?? '').includes('text/html'));
  res.writeHead(error.status, errorHeaders(error, type, Buffer.byteLength(body)));
  res.end(req.method === 'HEAD' ? undefined : body);
}

/** The same answer on a raw socket (an upgrade request the gateway cannot tunnel), then closes it. */
export function sendSocketError(socket: Duplex, error: GatewayError): void {
  const { type, body } = renderError(error, false);
  const headers = Object.entries({ ...errorHeaders(error, type, Buffer.byteLength(body)), connection: 'close' })
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join('');
  socket.end(`HTTP/1.1 ${error.status} ${STATUS_CODES[error.status] ?? 'Error'}\r\n${headers}\r\n${body}`);
}
