import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { HttpError } from './errors.js';

/**
 * A rule every call to a role server is held to before its route's own checks (the Host name, CORS,
 * CSRF, the body's charset): the error a call that breaks it is answered with, else undefined.
 */
export type RequestRule = (request: FastifyRequest, reply: FastifyReply) => HttpError | undefined;

/**
 * Holds each call to the rules, in their order, in one onRequest hook, stopping at the first broken:
 * a hook per rule cost every call of every role a pass of Fastify's hook runner each (issue 29: the
 * directory's reads lost a quarter of their throughput to per-request hooks). A callback hook, not an
 * async one, which would cost a promise and a microtask per call.
 */
export function installRequestRules(server: FastifyInstance, rules: readonly RequestRule[]): void {
  server.addHook('onRequest', (request, reply, done) => {
    for (const rule of rules) {
      const broken = rule(request, reply);
      if (broken !== undefined) return done(broken);
    }
    done();
  });
}
