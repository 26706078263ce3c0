import type { FastifyInstance, FastifyRequest } from 'fastify';
import { badRequest } from '../../../http/errors.js';

// Webhook bodies are parsed by the hooks' own content-type parsers: so that a malformed body gets
// a 400 that says what is wrong, and so that GitHub's can be verified on its raw bytes first.

/** JSON.parse with a 400 that names the problem. */
export function parseJson(text: string, what = 'the body'): unknown {
  if (text.trim() === '') throw badRequest(`${what} is empty: a JSON object is required`);
  try {
    return JSON.parse(text) as unknown;
  } catch (error) {
    throw badRequest(`${what} is not valid JSON: ${(error as Error).message}`);
  }
}

export type RawBodyCheck = (request: FastifyRequest, raw: Buffer) => void;

/**
 * Replaces the scope's parsers of `contentTypes` with one that reads the raw bytes, runs `check` on
 * them (GitHub's signature), then parses JSON; form bodies (`payload=<json>`, GitHub's other
 * format) are read from their `payload` field.
 */
export function useJsonBodies(scope: FastifyInstance, contentTypes: string[], check: RawBodyCheck = () => undefined): void {
  scope.removeContentTypeParser(contentTypes.filter((type) => scope.hasContentTypeParser(type)));
  const parse = (form: boolean) => (request: FastifyRequest, raw: Buffer, done: (error: Error | null, body?: unknown) => void) => {
    try {
      check(request, raw);
      const text = raw.toString('utf8');
      if (!form) return done(null, parseJson(text));
      const payload = new URLSearchParams(text).get('payload');
      if (payload === null) throw badRequest('the form body has no payload field');
      done(null, parseJson(payload, 'the payload field'));
    } catch (error) {
      done(error as Error);
    }
  };
  for (const type of contentTypes) {
    scope.addContentTypeParser(type, { parseAs: 'buffer' }, parse(type === 'application/x-www-form-urlencoded'));
  }
}
