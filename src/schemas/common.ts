import { Type, type SchemaOptions, type Static } from '@sinclair/typebox';

// Validation messages name the rule through `description`: the error handler
// (src/http/errors.ts) says "<field> must be <description>" for pattern and format failures.

export const DNS_LABEL = '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$';

export const ServiceName = Type.String({
  pattern: DNS_LABEL,
  description: 'a DNS label: 1-63 lowercase letters, digits or "-", starting and ending with a letter or digit',
  examples: ['web'],
});

/** `<service>-<instance>.service`. */
export const UnitName = Type.String({
  pattern: '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?-[1-9][0-9]{0,4}\\.service$',
  description: 'a unit name: <service>-<instance>.service',
  examples: ['web-1.service'],
});

export const ErrorReply = Type.Object(
  {
    statusCode: Type.Integer(),
    error: Type.String(),
    message: Type.String(),
  },
  { $id: 'ErrorReply', description: 'Every error: the HTTP status, its name, and what went wrong.' },
);
export type ErrorReply = Static<typeof ErrorReply>;

export const NameParams = Type.Object({ name: ServiceName });
export type NameParams = Static<typeof NameParams>;

/** One of a list of words (src/schemas/states.ts), as a union of literals. */
export const literalUnion = <T extends string>(values: readonly T[], options?: SchemaOptions) => Type.Union(values.map((value) => Type.Literal(value)), options);

/** Error replies every route may give, for the OpenAPI document. */
/** A caller's write refused: its token is over its write budget (429), the store over its space limit (507). */
export const writeRefusals = { 429: ErrorReply, 507: ErrorReply } as const;

export const errorResponses = {
  400: ErrorReply,
  404: ErrorReply,
  409: ErrorReply,
  502: ErrorReply,
  503: ErrorReply,
} as const;

/**
 * A response that is not JSON (a log, an event stream): the OpenAPI document names its real
 * content type. Such replies are streamed as they come, never serialised against a schema.
 */
export const textResponse = (contentType: 'text/plain' | 'text/event-stream', description: string) =>
  ({ description, content: { [contentType]: { schema: Type.Unsafe<unknown>({ type: 'string' }) } } }) as const;
