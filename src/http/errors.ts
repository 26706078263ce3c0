import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { StoreUnavailableError } from '../store/store.js';

// One error type for the whole code base, rendered by one handler into {statusCode, error, message}.

export class HttpError extends Error {
  constructor(
    readonly statusCode: number,
    message: string,
    /** Sent as Retry-After: when the refused call may succeed (429, 503). */
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
    this.name = 'HttpError';
  }
}

export const badRequest = (message: string) => new HttpError(400, message);
export const unauthorized = (message: string) => new HttpError(401, message);
export const notFound = (message: string) => new HttpError(404, message);
export const conflict = (message: string) => new HttpError(409, message);
export const forbidden = (message: string) => new HttpError(403, message);
export const payloadTooLarge = (message: string) => new HttpError(413, message);
export const badGateway = (message: string) => new HttpError(502, message);
export const unavailable = (message: string) => new HttpError(503, message);

interface ValidationIssue {
  keyword: string;
  instancePath: string;
  params: Record<string, unknown>;
  message?: string;
  parentSchema?: { description?: string; properties?: Record<string, unknown>; [keyword: string]: unknown };
}

const fieldOf = (issue: ValidationIssue): string => issue.instancePath.replace(/^\//, '').replace(/\//g, '.');
const join = (path: string, name: string) => (path ? `${path}.${name}` : name);

/** Field names that belong to the other API's form: say where they go instead. */
const renamedFields: Record<string, string> = {
  containerRepository: 'containerImage',
  containerImage: 'containerRepository',
};

function describeIssue(issue: ValidationIssue, context: string): string {
  const field = fieldOf(issue);
  switch (issue.keyword) {
    case 'required':
      return `${join(field, String(issue.params.missingProperty))} is required`;
    case 'additionalProperties': {
      const extra = String(issue.params.additionalProperty);
      const where = field || context;
      const rename = renamedFields[extra];
      if (rename && issue.parentSchema?.properties && rename in issue.parentSchema.properties) {
        return `${join(field, extra)} is not accepted here: this API names the image repository ${rename}`;
      }
      return `${join(field, extra)} is not a known field of ${where}`;
    }
    case 'minProperties':
      return `${field || context} must name at least one field`;
    case 'maxProperties':
      return `${field || context} must hold at most ${String(issue.params.limit)} entries`;
    case 'maxItems':
      return `${field || context} must hold at most ${String(issue.params.limit)} items`;
    default: {
      const rule = issue.parentSchema?.description ?? issue.message ?? 'be valid';
      return `${field || context} must ${issue.parentSchema?.description ? 'be ' : ''}${rule}`.replace(/must must/, 'must');
    }
  }
}

/** Picks the most telling issue: unions report one error per branch, the first concrete one says most. */
export function describeValidation(issues: ValidationIssue[], context: string): string {
  const concrete = issues.filter((issue) => issue.keyword !== 'anyOf' && issue.keyword !== 'oneOf');
  // A field of the other API's form explains a "required" failure better than the failure itself.
  const renamed = concrete.find((issue) => issue.keyword === 'additionalProperties' && String(issue.params.additionalProperty) in renamedFields);
  const chosen = renamed ?? concrete.find((issue) => issue.keyword !== 'type' || issue.params.type !== 'null') ?? concrete[0] ?? issues[0];
  return chosen ? describeIssue(chosen, context) : `${context} is invalid`;
}

const statusNames: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  409: 'Conflict',
  413: 'Payload Too Large',
  415: 'Unsupported Media Type',
  421: 'Misdirected Request',
  429: 'Too Many Requests',
  507: 'Insufficient Storage',
  500: 'Internal Server Error',
  502: 'Bad Gateway',
  503: 'Service Unavailable',
};
export const statusName = (status: number): string => statusNames[status] ?? (status >= 500 ? 'Server Error' : 'Error');

export function renderError(error: FastifyError | Error, request: FastifyRequest, reply: FastifyReply): void {
  let status = 500;
  let message = error.message;
  const fastifyError = error as FastifyError & { validation?: ValidationIssue[]; validationContext?: string };
  if (fastifyError.validation) {
    status = 400;
    message = describeValidation(fastifyError.validation, fastifyError.validationContext ?? 'body');
  } else if (error instanceof HttpError) {
    status = error.statusCode;
    if (error.retryAfterSeconds !== undefined) void reply.header('retry-after', String(error.retryAfterSeconds));
  } else if (error instanceof StoreUnavailableError) {
    status = 503;
  } else if (typeof fastifyError.statusCode === 'number' && fastifyError.statusCode >= 400) {
    status = fastifyError.statusCode;
  }
  if (status >= 500) request.log.error({ err: error }, message);
  else request.log.info({ status, message }, 'request rejected');
  if (status === 500) message = `internal error: ${message}`;
  void reply.status(status).send({ statusCode: status, error: statusName(status), message });
}
