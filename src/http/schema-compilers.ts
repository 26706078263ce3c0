import type { Ajv, AnySchema, ValidateFunction } from 'ajv';
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler';

// A role's routes are compiled when they are first called, not when the server starts (issue 29:
// every role <= 100 MiB idle). Fastify compiles at start an Ajv validator for each route's body,
// querystring and params and a fast-json-stringify serializer for each status of its response
// schema (about eight a route here: 200 and the error replies), HEAD twins of GET routes included:
// generated source, closures and their bytecode held for the process's life, while an idle role
// answers /healthz, /readyz and /metrics and most routes are never called at all.
// The behaviour is the same: the same compiler, the same options and schema, only later.

/**
 * A validator that Ajv compiles on its first call. Fastify reads `schemaEnv` (to give Ajv the
 * request as the parent of a coerced root value) and `errors` after a call: both are the compiled
 * validator's.
 */
export function validatorOnFirstUse<T = unknown>(ajv: Ajv, schema: AnySchema): ValidateFunction<T> {
  let compiled: ValidateFunction<T> | undefined;
  const validator = () => (compiled ??= ajv.compile<T>(schema));
  const validate = ((data: unknown, context?: Parameters<ValidateFunction>[1]) => validator()(data, context)) as ValidateFunction<T>;
  Object.defineProperties(validate, {
    schema: { value: schema },
    schemaEnv: { get: () => validator().schemaEnv },
    errors: { get: () => compiled?.errors },
  });
  return validate;
}

type SerializerFactory = ReturnType<typeof SerializerSelector>;

/**
 * Fastify's own serializer factory (fast-json-stringify with the server's external schemas and
 * options), each serializer built on its first call. Given to Fastify as
 * `schemaController.compilersFactory.buildSerializer`.
 */
export function serializersOnFirstUse(): SerializerFactory {
  const buildSerializer = SerializerSelector();
  return (externalSchemas, options) => {
    const compile = buildSerializer(externalSchemas, options);
    return (route) => {
      let serialize: ((payload: unknown) => string) | undefined;
      return (payload) => (serialize ??= compile(route))(payload);
    };
  };
}
