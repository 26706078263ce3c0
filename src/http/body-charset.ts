import { HttpError } from './errors.js';
import type { RequestRule } from './request-rules.js';

// Fastify reads every JSON body as UTF-8 whatever charset its Content-Type names, so a body
// labelled UTF-16 or Latin-1 would be taken for text its sender did not write. Such a body is
// refused before it is parsed; UTF-8, its spelling without the dash and US-ASCII (a subset) pass.

const CHARSET = /;\s*charset\s*=\s*"?([^";\s]+)"?/i;
const READ_AS_UTF8 = new Set(['utf-8', 'utf8', 'us-ascii']);

/** The charset a Content-Type names that is not read as UTF-8, if it names one. */
export function foreignCharset(contentType: string | undefined): string | undefined {
  const charset = contentType === undefined ? undefined : CHARSET.exec(contentType)?.[1]?.toLowerCase();
  return charset === undefined || READ_AS_UTF8.has(charset) ? undefined : charset;
}

/** Every call's rule (a GET has no Content-Type: one header read there). */
export const bodyCharsetRequestRule: RequestRule = (request) => {
  const charset = foreignCharset(request.headers['content-type']);
  return charset === undefined ? undefined : new HttpError(415, `content-type: a body must be UTF-8 (charset=utf-8 or none), not charset=${charset}`);
};
