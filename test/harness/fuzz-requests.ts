// Generates hostile requests from a role's served OpenAPI document, for the fuzz test: malformed
// and poisoned bodies, wrong types, huge and deeply nested values, bad parameters, tokens and
// headers. Every request that could change something (any method but GET/HEAD/OPTIONS) and takes
// input is made invalid by construction (its body or its path), so whatever token it carries it
// must change nothing; reads may be well-formed. All randomness comes from the seeded generator, so a seed
// replays the same requests.

import { pick, type Random } from './random.js';

interface SchemaObject {
  type?: string | string[];
  properties?: Record<string, SchemaObject>;
  required?: string[];
  items?: SchemaObject;
  [keyword: string]: unknown;
}

export interface Operation {
  method: string;
  /** OpenAPI form: /services/{name} */
  path: string;
  pathParams: string[];
  query: Record<string, SchemaObject>;
  body?: SchemaObject;
}

interface OpenApiDocument {
  paths: Record<string, Record<string, { parameters?: { in: string; name: string; schema?: SchemaObject }[]; requestBody?: { content?: Record<string, { schema?: SchemaObject }> } }>>;
}

/** The operations an OpenAPI document lists (swagger-ui's own pages are left out). */
export function operationsOf(document: OpenApiDocument): Operation[] {
  const operations: Operation[] = [];
  for (const [path, methods] of Object.entries(document.paths)) {
    if (path.startsWith('/documentation')) continue;
    for (const [method, operation] of Object.entries(methods)) {
      const parameters = operation.parameters ?? [];
      const content = operation.requestBody?.content ?? {};
      const body = content['application/json']?.schema ?? Object.values(content)[0]?.schema;
      operations.push({
        method: method.toUpperCase(),
        path,
        pathParams: parameters.filter((p) => p.in === 'path').map((p) => p.name),
        query: Object.fromEntries(parameters.filter((p) => p.in === 'query').map((p) => [p.name, p.schema ?? {}])),
        ...(body ? { body } : {}),
      });
    }
  }
  return operations;
}

export interface FuzzRequest {
  method: string;
  /** Path and query, as sent. */
  path: string;
  headers: Record<string, string>;
  body?: string | Buffer;
  /** What was done to the request, for the failure message. */
  kind: string;
}

export interface Credentials {
  /** A valid admin token's secret. */
  admin: string;
  /** A valid read token's secret. */
  read: string;
}

const readMethods = new Set(['GET', 'HEAD', 'OPTIONS']);

const nastyStrings = [
  '',
  ' ',
  '__proto__',
  'constructor',
  'prototype',
  '../../etc/passwd',
  '..%2f..%2f',
  '%00',
  '\u0000',
  '\u202e\u0000\ud800',
  '${jndi:ldap://x}',
  "' OR 1=1 --",
  '<script>alert(1)</script>',
  '*-*-*-*-*-*-*-*-*-*-*-*-*-*-*-*-*-*-*-*-x',
  '-1',
  '1e309',
  'NaN',
  'true',
  'null',
  '[]',
  '{}',
];

const randomText = (rnd: Random, length: number): string => {
  const alphabet = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~!*:@/?#[]%ü€😀 \t"\\';
  let text = '';
  for (let i = 0; i < length; i++) text += alphabet[Math.floor(rnd() * alphabet.length)];
  return text;
};

/** A value of any JSON type, often hostile. */
function anyValue(rnd: Random, depth = 0): unknown {
  const choice = Math.floor(rnd() * (depth > 2 ? 7 : 10));
  switch (choice) {
    case 0:
      return pick(rnd, nastyStrings);
    case 1:
      return randomText(rnd, Math.floor(rnd() * 40));
    case 2:
      return pick(rnd, [0, -1, 1.5, 2 ** 53 + 1, -(2 ** 63), 1e308, Number.MIN_VALUE]);
    case 3:
      return rnd() < 0.5;
    case 4:
      return null;
    case 5:
      return 'x'.repeat(pick(rnd, [256, 4096, 70_000]));
    case 6:
      return Math.floor(rnd() * 1000);
    case 7:
      return Array.from({ length: Math.floor(rnd() * 4) }, () => anyValue(rnd, depth + 1));
    default:
      return Object.fromEntries(Array.from({ length: Math.floor(rnd() * 4) }, () => [pick(rnd, ['a', 'name', 'env', '__proto__', 'constructor', randomText(rnd, 6)]), anyValue(rnd, depth + 1)]));
  }
}

const typeOf = (schema: SchemaObject | undefined): string | undefined => (Array.isArray(schema?.type) ? schema.type[0] : schema?.type);

/** A JSON value whose type is not the one `schema` asks for. */
function wrongTypeValue(rnd: Random, schema: SchemaObject): unknown {
  const wanted = typeOf(schema);
  const candidates: [string, unknown][] = [
    ['string', 'wrong'],
    ['integer', 12],
    ['number', 1.25],
    ['boolean', true],
    ['object', { wrong: true }],
    ['array', ['wrong']],
  ];
  const others = candidates.filter(([type]) => type !== wanted && !(wanted === 'number' && type === 'integer'));
  return pick(rnd, others)[1];
}

/** A loose guess at a valid value, so that other fields' faults are reached past the first check. */
function plausible(rnd: Random, schema: SchemaObject | undefined, depth = 0): unknown {
  switch (typeOf(schema)) {
    case 'string':
      return pick(rnd, ['fuzz', 'registry.example/fuzz:1', 'web-1.service', 'a']);
    case 'integer':
    case 'number':
      return Math.floor(rnd() * 10);
    case 'boolean':
      return rnd() < 0.5;
    case 'array':
      return depth > 3 ? [] : [plausible(rnd, schema?.items, depth + 1)];
    case 'object':
      return depth > 3
        ? {}
        : Object.fromEntries(Object.entries(schema?.properties ?? {}).map(([name, property]) => [name, plausible(rnd, property, depth + 1)]));
    default:
      return anyValue(rnd, 2);
  }
}

/** A body that no JSON route can accept: each form is invalid whatever the route's schema. */
function invalidBody(rnd: Random, operation: Operation): { body: string | Buffer; contentType?: string; kind: string } {
  const base = operation.body ? plausible(rnd, operation.body) : {};
  const baseObject = base !== null && typeof base === 'object' && !Array.isArray(base) ? (base as Record<string, unknown>) : {};
  const json = JSON.stringify(baseObject);
  const forms: (() => { body: string | Buffer; contentType?: string; kind: string })[] = [
    () => ({ body: json.slice(0, Math.max(1, Math.floor(rnd() * json.length))), kind: 'truncated JSON' }),
    () => ({ body: `${json.slice(0, -1)}${json.length > 2 ? ',' : ''}}}`, kind: 'trailing garbage' }),
    () => ({ body: `{"__proto__": {"admin": true}, ${json.slice(1)}`.replace(/, }$/, '}'), kind: '__proto__ key' }),
    () => ({ body: JSON.stringify({ ...baseObject, constructor: { prototype: { admin: true } } }), kind: 'constructor.prototype' }),
    () => ({ body: `${'['.repeat(20_000)}${']'.repeat(20_000)}`, kind: 'array nested 20,000 deep' }),
    () => ({ body: `${'{"a":'.repeat(5_000)}1${'}'.repeat(5_000)}`, kind: 'object nested 5,000 deep' }),
    () => ({ body: `{"__proto__":${'{"a":'.repeat(3_000)}1${'}'.repeat(3_000)}}`, kind: '__proto__ nested 3,000 deep' }),
    () => ({ body: JSON.stringify(pick(rnd, ['a string', 42, true, null, [baseObject]])), kind: 'not an object' }),
    () => ({ body: JSON.stringify({ ...baseObject, ['x'.repeat(1000)]: 'x'.repeat(300_000) }), kind: 'huge unknown field' }),
    () => ({ body: Buffer.alloc(1_200_000, 'a'), kind: 'body over the 1 MB limit' }),
    () => ({ body: Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d]), kind: 'invalid UTF-8' }),
    () => ({ body: '', kind: 'empty JSON body' }),
    () => ({ body: json, contentType: pick(rnd, ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/xml', 'application/json; charset=utf-16']), kind: 'wrong content type' }),
    () => {
      const properties = Object.entries(operation.body?.properties ?? {}).filter(([, property]) => typeOf(property) !== undefined);
      if (properties.length === 0) return { body: '{,}', kind: 'malformed JSON' };
      const [name, property] = pick(rnd, properties);
      return { body: JSON.stringify({ ...baseObject, [name]: wrongTypeValue(rnd, property) }), kind: `wrong type for ${name}` };
    },
    () => ({ body: JSON.stringify({ ...baseObject, [`unknown_${randomText(rnd, 4)}`]: anyValue(rnd) }), kind: 'unknown field' }),
  ];
  const chosen = pick(rnd, forms)();
  // Bodies whose schema is not an object with closed properties could accept some of the forms
  // above; those routes get only forms no JSON route accepts.
  const closed = typeOf(operation.body) === 'object' && operation.body?.additionalProperties === false;
  if (!closed && ['wrong type', 'unknown field', 'huge unknown field', 'constructor.prototype', 'not an object'].some((kind) => chosen.kind.startsWith(kind))) {
    return { body: '{"unterminated": ', kind: 'truncated JSON' };
  }
  return chosen;
}

/** Percent-encoding that survives lone surrogates (they become U+FFFD, as on the wire). */
const encode = (text: string): string => encodeURIComponent(Buffer.from(text).toString());

/** A path parameter no route accepts (or, for reads, sometimes a plausible one). */
function pathValue(rnd: Random, valid: boolean): string {
  if (valid) return pick(rnd, ['fuzz-none', 'web', 'web-1.service', 'm-1', '1', 'bootstrap']) + (rnd() < 0.5 ? '' : `-${Math.floor(rnd() * 1e6)}`);
  return encode(pick(rnd, [`BAD NAME!${randomText(rnd, 5)}`, `x${'y'.repeat(300)} !`, '..!', '%00 !', '__proto__ !', ' !', `${pick(rnd, nastyStrings)} !`]));
}

function queryString(rnd: Random, operation: Operation): string {
  const pairs: string[] = [];
  for (const [name, schema] of Object.entries(operation.query)) {
    if (rnd() < 0.5) continue;
    const value = rnd() < 0.5 ? String(plausible(rnd, schema)) : String(pick(rnd, [...nastyStrings, 'x'.repeat(5000), '-5', '1.5', '99999999999999999999']));
    pairs.push(`${encode(name)}=${encode(value)}`);
  }
  if (rnd() < 0.2) pairs.push(pick(rnd, ['__proto__[admin]=1', 'constructor[prototype][admin]=1', 'a=1&a=2&a=3', `${randomText(rnd, 5)}=${randomText(rnd, 5)}`, '%zz=%zz', '=', '&&&']));
  return pairs.length > 0 ? `?${pairs.join('&')}` : '';
}

/** Who the request claims to be. */
function authorization(rnd: Random, credentials: Credentials): { headers: Record<string, string>; valid: boolean; kind: string } {
  const forms: [string, () => Record<string, string>, boolean][] = [
    ['admin token', () => ({ authorization: `Bearer ${credentials.admin}` }), true],
    ['admin token', () => ({ authorization: `Bearer ${credentials.admin}` }), true],
    ['read token', () => ({ authorization: `Bearer ${credentials.read}` }), true],
    ['no token', () => ({}), false],
    ['unknown token', () => ({ authorization: `Bearer plt_${randomText(rnd, 43).replace(/[^A-Za-z0-9_-]/g, 'a')}` }), false],
    ['malformed token', () => ({ authorization: pick(rnd, ['Bearer', 'Bearer ', 'Basic YWRtaW46YWRtaW4=', `Bearer ${credentials.admin}x`, `bearer ${'a'.repeat(4000)}`, 'Session garbage', 'Session ', `Bearer ${credentials.admin.slice(0, -1)}`]) }), false],
    ['forged session cookie', () => ({ cookie: `platform_session=${randomText(rnd, 30).replace(/[^A-Za-z0-9]/g, 'a')}; other=1` }), false],
  ];
  const [kind, headers, valid] = pick(rnd, forms);
  return { headers: headers(), valid, kind };
}

/** Headers a hostile client adds. */
function extraHeaders(rnd: Random): Record<string, string> {
  const headers: Record<string, string> = {};
  const count = Math.floor(rnd() * 3);
  for (let i = 0; i < count; i++) {
    const [name, value] = pick(rnd, [
      ['origin', pick(rnd, ['http://evil.example', 'null', 'http://127.0.0.1'])],
      ['x-forwarded-for', pick(rnd, ['1.2.3.4', 'garbage, , ,', '::1', '127.0.0.1'.repeat(50)])],
      ['x-forwarded-host', 'evil.example'],
      ['accept', pick(rnd, ['text/event-stream', '*/*', 'application/xml', ''])],
      ['last-event-id', pick(rnd, ['-1', 'abc', '99999999999999999999'])],
      ['if-none-match', pick(rnd, ['*', '"x"', 'W/"x"'])],
      ['x-huge', 'h'.repeat(pick(rnd, [8_000, 20_000]))],
      ['sec-fetch-site', 'cross-site'],
      ['x-hub-signature-256', `sha256=${'0'.repeat(64)}`],
      ['x-github-event', pick(rnd, ['push', 'package', 'ping', '__proto__'])],
      // Names no role answers to (421) and, at the gateway, hosts it routes nowhere (404).
      ['host', pick(rnd, ['attacker.example:9000', 'nothing.platform.local', 'x.y.platform.internal', 'orchestrator.platform.local', '[::1]', '127.0.0.1.nip.io'])],
    ] as [string, string][]);
    headers[name] = value;
  }
  return headers;
}

/** One generated request for `operation`. */
export function generateRequest(rnd: Random, operation: Operation, credentials: Credentials): FuzzRequest {
  const read = readMethods.has(operation.method);
  const auth = authorization(rnd, credentials);
  // A change is made invalid in its path or its body; a read may be well-formed.
  const badPath = operation.pathParams.length > 0 && (read ? rnd() < 0.5 : !operation.body || rnd() < 0.3);
  const badParam = badPath ? pick(rnd, operation.pathParams) : undefined;
  let path = operation.path;
  for (const name of operation.pathParams) path = path.replace(`{${name}}`, pathValue(rnd, name !== badParam));
  path += queryString(rnd, operation);
  const headers: Record<string, string> = { ...auth.headers, ...extraHeaders(rnd) };
  const kinds = [auth.kind, ...(badParam ? [`invalid ${badParam}`] : [])];
  let body: string | Buffer | undefined;
  // A change that takes no input at all (POST /tokens/bootstrap, DELETE /session) goes as it is:
  // the store comparison shows whether it changed anything.
  if (!read && !badPath && operation.body) {
    const invalid = invalidBody(rnd, operation);
    body = invalid.body;
    headers['content-type'] = invalid.contentType ?? 'application/json';
    kinds.push(invalid.kind);
  } else if (!read && rnd() < 0.5) {
    body = JSON.stringify(anyValue(rnd));
    headers['content-type'] = 'application/json';
    kinds.push('any body');
  }
  return { method: operation.method, path, headers, ...(body === undefined ? {} : { body }), kind: kinds.join(', ') };
}

/** Request heads that are not valid HTTP, or are odd enough to bypass a client library. */
export function rawRequest(rnd: Random, host: string, token: string): { text: string; kind: string } {
  const forms: [string, string][] = [
    ['header without a colon', `GET /services HTTP/1.1\r\nHost: ${host}\r\nNoColonHere\r\n\r\n`],
    ['space before the colon', `GET /services HTTP/1.1\r\nHost : ${host}\r\n\r\n`],
    ['bad request line', `GET\r\n\r\n`],
    ['unknown method', `BREW /services HTTP/1.1\r\nHost: ${host}\r\n\r\n`],
    ['HTTP/0.9', `GET /services\r\n\r\n`],
    ['HTTP/2 preface', 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'],
    ['NUL in the path', `GET /services/\u0000x HTTP/1.1\r\nHost: ${host}\r\n\r\n`],
    ['dot segments', `GET /services/../metrics HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${token}\r\n\r\n`],
    ['encoded dot segments', `GET /services/%2e%2e/tokens HTTP/1.1\r\nHost: ${host}\r\n\r\n`],
    ['chunked with a bad chunk size', `POST /services HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`],
    ['both Content-Length and chunked', `POST /services HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`],
    ['two Content-Lengths', `POST /services HTTP/1.1\r\nHost: ${host}\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}`],
    ['negative Content-Length', `POST /services HTTP/1.1\r\nHost: ${host}\r\nContent-Length: -1\r\n\r\n`],
    ['obsolete line folding', `GET /services HTTP/1.1\r\nHost: ${host}\r\nX-Folded: a\r\n b\r\n\r\n`],
    ['no Host header', `GET /healthz HTTP/1.1\r\n\r\n`],
    ['two Host headers', `GET /healthz HTTP/1.1\r\nHost: ${host}\r\nHost: evil.example\r\n\r\n`],
    ['bare LF line ends', `GET /healthz HTTP/1.1\nHost: ${host}\n\n`],
    ['control character in a header', `GET /healthz HTTP/1.1\r\nHost: ${host}\r\nX-Bad: a\u0001b\r\n\r\n`],
    ['request line over 20 KB', `GET /${'a'.repeat(20_000)} HTTP/1.1\r\nHost: ${host}\r\n\r\n`],
    ['absolute-form target', `GET http://${host}/services HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${token}\r\n\r\n`],
    ['absolute-form target, foreign host', `GET http://evil.example/services HTTP/1.1\r\nHost: evil.example\r\n\r\n`],
    ['foreign Host (DNS rebinding)', `GET /services HTTP/1.1\r\nHost: attacker.example:9000\r\nAuthorization: Bearer ${token}\r\n\r\n`],
  ];
  const [kind, text] = pick(rnd, forms);
  return { kind, text };
}
