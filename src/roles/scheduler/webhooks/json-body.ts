import type { FastifyInstance, FastifyRequest } from 'fastify';
import secureJson from 'secure-json-parse';
import { badRequest } from '../../../http/errors.js';

// Webhook bodies are parsed by the hooks' own content-type parsers: so that a malformed body gets
// a 400 that says what is wrong, and so that GitHub's can be verified on its raw bytes first.

/**
 * JSON with a 400 that names the problem. Parsed as Fastify parses every other body: a
 * `__proto__` or `constructor.prototype` key is refused, since code that copies or merges the
 * parsed object would set the prototype of its objects from it.
 */
export function parseJson(text: string, what = 'the body'): unknown {
  if (text.trim() === '') throw badRequest(`${what} is empty: a JSON object is required`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text) as unknown;
  } catch (error) {
    throw badRequest(`${what} is not valid JSON: ${(error as Error).message}`);
  }
  if (parsed === null || typeof parsed !== 'object') return parsed;
  try {
    secureJson.scan(parsed);
  } catch {
    throw badRequest(`${what} holds a __proto__ or constructor.prototype key: such keys are refused (they could replace the prototype of objects built from the body)`);
  }
  return parsed;
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
