// Reading a request's head from Node's flat rawHeaders list without building `req.headers`
// (which Node assembles lazily, one object per request).

/** The first value of header `name` (lower case), if present. */
export function headerValue(raw: readonly string[], name: string): string | undefined {
  for (let i = 0; i < raw.length; i += 2) {
    const candidate = raw[i]!;
    if (candidate.length === name.length && (candidate === name || candidate.toLowerCase() === name)) return raw[i + 1];
  }
  return undefined;
}

/** Whether the request carries a body (HTTP/1.1 framing: Content-Length above 0, or Transfer-Encoding). */
export function hasBody(raw: readonly string[]): boolean {
  const length = headerValue(raw, 'content-length');
  if (length !== undefined && length !== '0') return true;
  return headerValue(raw, 'transfer-encoding') !== undefined;
}

/**
 * Whether a request target is origin-form (`/path`) or `*`: absolute-form (`http://host/path`)
 * would make a forward proxy of the gateway, routed by one name and naming another, so both data
 * planes refuse it (haproxy-config.ts) (L6).
 */
export const isOriginForm = (target: string): boolean => target.charCodeAt(0) === 47 /* / */ || target === '*';

/** The 400 both planes answer a target that is not origin-form. */
export const NOT_ORIGIN_FORM = { status: 400, message: 'request target: must be a path (origin-form, starting with /); the gateway is no forward proxy' } as const;
