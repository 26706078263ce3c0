// The headers a request and a response carry across the gateway (RFC 9110 §7.6.1): hop-by-hop
// headers, and those the Connection header names, stay on their own hop; the upstream learns the
// client's address, scheme and host from X-Forwarded-*. Headers are flat [name, value, …] lists,
// as Node's rawHeaders and undici take them, so nothing is parsed into objects on the hot path.

const hopByHop = new Set(['connection', 'keep-alive', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'http2-settings']);

/**
 * The client's own claims of its address and scheme in headers other than X-Forwarded-*: a unit
 * could take them for the gateway's, so they are dropped, on both data planes (haproxy-config.ts) (L7).
 */
export const CLIENT_CLAIMS: readonly string[] = ['forwarded', 'x-real-ip'];

/** Headers the gateway sets itself (X-Forwarded-For is extended, not replaced), has already acted on (Expect), or drops. */
const replaced = new Set(['x-forwarded-proto', 'x-forwarded-host', 'x-forwarded-for', 'expect', ...CLIENT_CLAIMS]);

const isHopByHop = (name: string): boolean => hopByHop.has(name) || name.startsWith('proxy-');

export interface ForwardedFor {
  /** The client's address as the gateway saw it. */
  clientAddress: string;
  /** The Host the client asked for. */
  host: string;
  /** `https` on the gateway's TLS listener, else `http`. */
  proto: string;
  /** For an upgrade (WebSocket) request: the Upgrade header's value, kept with `Connection: upgrade`. */
  upgrade?: string;
}

/** Extra header names a Connection header lists (beyond close, keep-alive, upgrade), lower case; undefined when none. */
function connectionTokens(value: string, tokens: Set<string> | undefined): Set<string> | undefined {
  for (const token of value.split(',')) {
    const name = token.trim().toLowerCase();
    if (name !== '' && name !== 'close' && name !== 'keep-alive' && name !== 'upgrade') (tokens ??= new Set()).add(name);
  }
  return tokens;
}

/**
 * Copies the end-to-end headers of `raw` into a new flat list (lower-case names are not required
 * of callers). Returns the list, the X-Forwarded-For values seen, and drops what Connection names.
 */
function endToEnd(raw: readonly string[], skip: Set<string>): { headers: string[]; forwardedFor: string | undefined } {
  const headers: string[] = [];
  let forwardedFor: string | undefined;
  let named: Set<string> | undefined;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase();
    if (isHopByHop(name)) {
      if (name === 'connection') named = connectionTokens(raw[i + 1]!, named);
      continue;
    }
    if (skip.has(name)) {
      if (name === 'x-forwarded-for') forwardedFor = forwardedFor === undefined ? raw[i + 1]! : `${forwardedFor}, ${raw[i + 1]!}`;
      continue;
    }
    headers.push(name, raw[i + 1]!);
  }
  // Rare: a Connection header naming other headers (they are hop-by-hop too).
  if (named !== undefined) {
    const kept: string[] = [];
    for (let i = 0; i < headers.length; i += 2) if (!named.has(headers[i]!)) kept.push(headers[i]!, headers[i + 1]!);
    return { headers: kept, forwardedFor };
  }
  return { headers, forwardedFor };
}

const nothing = new Set<string>();

/** The request headers to send upstream. */
export function upstreamRequestHeaders(raw: readonly string[], forwarded: ForwardedFor): string[] {
  const { headers, forwardedFor } = endToEnd(raw, replaced);
  headers.push(
    'x-forwarded-for',
    forwardedFor === undefined ? forwarded.clientAddress : `${forwardedFor}, ${forwarded.clientAddress}`,
    'x-forwarded-proto',
    forwarded.proto,
    'x-forwarded-host',
    forwarded.host,
  );
  if (forwarded.upgrade !== undefined) headers.push('connection', 'upgrade', 'upgrade', forwarded.upgrade);
  return headers;
}

/** The response headers to send to the client (undici hands them over as latin1 Buffers). */
export function clientResponseHeaders(raw: readonly (Buffer | string)[]): string[] {
  const text: string[] = new Array<string>(raw.length);
  for (let i = 0; i < raw.length; i++) {
    const value = raw[i]!;
    text[i] = typeof value === 'string' ? value : value.toString('latin1');
  }
  return endToEnd(text, nothing).headers;
}

/** An X-Forwarded-For address: IPv4-mapped IPv6 addresses are shown as IPv4. */
export const clientAddress = (remoteAddress: string | undefined): string =>
  remoteAddress === undefined ? 'unknown' : remoteAddress.startsWith('::ffff:') ? remoteAddress.slice(7) : remoteAddress;

/** The scheme the client used: the TLS listener's sockets are encrypted. */
export const schemeOf = (req: { socket: object }): 'http' | 'https' => ((req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http');
