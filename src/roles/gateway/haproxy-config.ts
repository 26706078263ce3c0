import { STATUS_CODES } from 'node:http';
import { renderError, type GatewayError } from './gateway-error.js';
import { RETRY_AFTER_SECONDS } from './proxy.js';
import { LISTENER_HEADER } from './listener-policy.js';
import { CLIENT_CLAIMS } from './forwarded-headers.js';
import { NOT_ORIGIN_FORM } from './request-head.js';
import { REFUSED_RETRY_AFTER_SECONDS, addressCapMessage, refusalBody, totalCapMessage } from '../../http/connection-limits.js';

// The HAProxy data plane's configuration, written from what the gateway knows: pure, so every
// line can be read and tested without HAProxy. Its backends are a pool that names no route: the
// routes map says which route each serves, and the answers that name a route read it there. Its
// shape changes only when the pool runs dry; everything else (which backend a route takes, which
// unit sits in which slot, draining, more slots, which host leads to which backend) changes through
// the Runtime API (haproxy-slots.ts, haproxy-runtime.ts), and the state at the time is written in
// too, so a reload or a restart starts where the last worker was.

/** A server slot: free (maint), or a unit's address taking requests. */
export interface SlotConfig {
  address?: string;
  unit?: string;
}

export interface BackendConfig {
  /** `b_<n>` (poolBackendName). */
  name: string;
  /** Its line in the routes map: routeLabel of the route it serves or last served, `-` if none. */
  label: string;
  slots: SlotConfig[];
}

export interface Listener {
  host: string;
  port: number;
  /** `public` (the only one on loopback), or `internal`: with both, the public one routes no internal host. */
  name: 'public' | 'internal';
}

export interface HaproxySettings {
  threads: number;
  requestTimeoutSeconds: number;
  idleTimeoutSeconds: number;
  headersTimeoutSeconds: number;
  maxHeaderSize: number;
  maxConnections: number;
  maxConnectionsPerAddress: number;
  upstreamConnections: number;
}

export interface HaproxyFiles {
  runtimeSocket: string;
  pidFile: string;
  /** host name → backend name (the runtime map). */
  hostsMap: string;
  /** `<backend>-<slot>` → unit name, for the 502/504 messages. */
  unitsMap: string;
  /** backend name → routeLabel of its route, for the answers that name it. */
  routesMap: string;
  /** The Lua actions (connectionHeadersLua). */
  lua: string;
}

export interface HaproxyConfigInput {
  listeners: Listener[];
  internalDomain: string;
  /** The role's own Node server (its endpoints and the 404 answers), on 127.0.0.1. */
  ownPort: number;
  settings: HaproxySettings;
  files: HaproxyFiles;
  backends: BackendConfig[];
  /** With --https-redirect: the public domain, whose routed hosts the Node server answers with 308s on plain HTTP. */
  httpsRedirectDomain?: string;
  /** With --https-port: HAProxy terminates TLS (haproxy-certificates.ts keeps the crt-list). */
  tls?: TlsBind;
  /** Where HAProxy sends its latency lines (haproxy-traffic-log.ts); none: no line at all. */
  trafficLog?: TrafficLogTarget;
}

export interface TrafficLogTarget {
  /** The UDP port on 127.0.0.1 the gateway receives the lines on. */
  port: number;
  /** One routed request in this many is logged (TRAFFIC_LOG_SAMPLE_EVERY; 1: every one). */
  sampleEvery: number;
}

export interface TlsBind {
  host: string;
  port: number;
  /** The crt-list file: the placeholder first, then one line per public host that has a certificate. */
  crtList: string;
  /** The public domain: its `<name>.<domain>` hosts get HSTS over TLS when hstsMaxAgeSeconds is set. */
  domain: string;
  hstsMaxAgeSeconds?: number | undefined;
}

/** The pool's backends: the route a backend serves is in the routes map, never in its name. */
export const poolBackendName = (index: number): string => `b_${index}`;

/**
 * HAProxy's copy of a pool backend for one of its threads. Each thread routes the requests of its
 * client connections to its own copy (`use_backend ….%[thread]`), so no two threads share a
 * backend's load-balancing lock: with `balance leastconn` that lock is taken on every pick, take
 * and release, and two threads spinning on it cost 5-7 µs a request (docs/gateway.md). Every copy
 * holds the same servers under the same names, so the units map, the slots and the commands that
 * change them (threadCommands) are the pool backend's.
 */
export const threadBackendName = (backend: string, thread: number): string => `${backend}.${thread}`;

/** The pool backend (`b_<n>`) a thread's copy belongs to: what the hosts and routes maps name. */
export const poolBackendOf = (haproxyBackend: string): string => haproxyBackend.split('.')[0]!;

/** A unit's connection cap shared out over the threads' copies, so the copies together stay within it. */
export const threadShare = (upstreamConnections: number, threads: number): number => Math.max(1, Math.floor(upstreamConnections / threads));

/** A Runtime API command that names a pool backend's server, repeated for each thread's copy; the others as they are. */
export function threadCommands(commands: readonly string[], threads: number): string[] {
  return commands.flatMap((command) => {
    const match = /^((?:set|add|del|enable|disable) server) (b_\d+)\/(.*)$/.exec(command);
    if (match === null) return [command];
    const [, verb, backend, rest] = match;
    return Array.from({ length: threads }, (_, thread) => `${verb} ${threadBackendName(backend!, thread)}/${rest}`);
  });
}

/** A route in the routes map: `service:web`, `component:orchestrator` (names are DNS labels, without a colon). */
export const routeLabel = (route: { name: string; kind: 'service' | 'component' }): string => `${route.kind}:${route.name}`;

/** Server names are unique across backends so the units map can key on `srv_name` alone. */
export const slotName = (backend: string, index: number): string => `${backend}-${index + 1}`;

/** Slots a backend gets for `targets` units: room to double (a rolling update's surge, drains) before a reload. */
export function slotsFor(targets: number): number {
  let slots = 4;
  while (slots < targets * 2) slots *= 2;
  return slots;
}

const LOOPBACK_SOURCES = '127.0.0.0/8 ::1';

/** A Connection header naming a header (a token other than close, keep-alive, upgrade): only then does the Lua action run. */
const NAMES_HEADERS = '(^|,)[[:space:]]*(?!(close|keep-alive|upgrade)[[:space:]]*(,|$))[^,[:space:]]';

/** Hop-by-hop headers the gateway drops (besides Connection, which HAProxy handles, and those it names), and the client's claims. */
const REQUEST_DROPPED = ['proxy-authorization', 'proxy-connection', 'te', 'trailer', 'keep-alive', ...CLIENT_CLAIMS];
const RESPONSE_HOP_BY_HOP = ['keep-alive', 'trailer', 'proxy-authenticate'];

/** `bind` address: HAProxy reads the last colon as the port's, so IPv6 needs its family prefix. */
const bindAddress = ({ host, port }: Listener): string => (host.includes(':') ? `ipv6@${host}:${port}` : `${host}:${port}`);

/** A server address in the configuration and `add server` (`address` is host:port, IPv6 in brackets). */
export const serverAddress = (address: string): string => {
  const colon = address.lastIndexOf(':');
  const host = address.slice(0, colon).replace(/^\[(.*)\]$/, '$1');
  return host.includes(':') ? `ipv6@${host}:${address.slice(colon + 1)}` : address;
};

/** The route's kind and name, read from the routes map by the backend's name when HAProxy answers. */
const routeKind = (files: HaproxyFiles): string => `%[be_name,field(1,.),map_str(${files.routesMap}),field(1,:)]`;
const routeName = (files: HaproxyFiles): string => `%[be_name,field(1,.),map_str(${files.routesMap}),field(2,:)]`;

/** Text for a double-quoted log-format string: HAProxy's quoting, then `%` (log-format) escaped. */
const logFormatText = (text: string): string => text.replace(/[\\"$]/g, (c) => `\\${c}`).replace(/%/g, '%%').replace(/\n/g, '\\n');

/**
 * The 503 body the Node plane sends (gateway-error.ts), byte for byte, as an lf-string naming the
 * backend's route: rendered with a placeholder name (a DNS label, so JSON and HTML leave it as is)
 * that becomes the routes map lookup.
 */
export function noUnitBody(files: HaproxyFiles, html: boolean): string {
  const placeholder = 'ROUTEKIND ROUTENAME';
  const error: GatewayError = { status: 503, message: `${placeholder} has no healthy unit`, retryAfter: RETRY_AFTER_SECONDS };
  return logFormatText(renderError(error, html).body).replace(placeholder, `${routeKind(files)} ${routeName(files)}`);
}

/**
 * HAProxy answers a request whose unit it could not connect to (its retry included) with its own
 * 503; the Node plane answers 502 naming the unit. The backend's 503 page carries this header,
 * which the frontend turns into a 502 and removes (`http-after-response` also sees HAProxy's own
 * answers); a unit's own 503 loses the header first, so it is never rewritten.
 */
const UNREACHABLE_HEADER = 'x-platform-unreachable';

/**
 * An `http-error` for a unit that failed: the JSON answer the Node plane gives, the unit named
 * through the units map. `answered` is the status HAProxy gives the failure when it is not `status`
 * (503 for a connection that could not be made).
 */
function unitErrorLine(status: 502 | 504, settings: HaproxySettings, files: HaproxyFiles, answered?: 503): string {
  const what = status === 504 ? `sent no response within ${settings.requestTimeoutSeconds} s` : 'could not be reached';
  const body = `{"statusCode":${status},"error":"${STATUS_CODES[status]}","message":"%[srv_name,map_str(${files.unitsMap})] of ${routeName(files)} ${what}"}\\n`;
  const marker = answered === undefined ? '' : ` hdr ${UNREACHABLE_HEADER} 1`;
  return `  http-error status ${answered ?? status} content-type "application/json; charset=utf-8" hdr cache-control no-store${marker} lf-string "${body.replace(/"/g, '\\"')}"`;
}

function globalSection({ settings, files }: HaproxyConfigInput): string[] {
  // Room for a request head up to the cap (rules see it and answer 431) plus HAProxy's rewrites.
  const bufsize = Math.max(16_384, settings.maxHeaderSize + 8_192);
  return [
    'global',
    `  nbthread ${settings.threads}`,
    // Room above the cap for connections to be accepted and told they are over it (capRules).
    `  maxconn ${settings.maxConnections + CAP_HEADROOM}`,
    `  tune.bufsize ${bufsize}`,
    `  stats socket ${files.runtimeSocket} mode 600 level admin expose-fd listeners`,
    `  pidfile ${files.pidFile}`,
    `  lua-load ${files.lua}`,
    // Workers left by a reload (long WebSockets) are stopped after this.
    '  hard-stop-after 1h',
    // Without SO_REUSEPORT no other process (a unit on host networking runs as root) can bind the
    // gateway's ports beside HAProxy and take a share of its connections, Authorization headers
    // included. Seamless reloads do not need it: new workers take the sockets over the master.
    '  noreuseport',
    '',
    'defaults',
    '  mode http',
    '  option http-keep-alive',
    '  option clitcpka',
    '  option srvtcpka',
    '  timeout connect 5s',
    `  timeout client ${settings.idleTimeoutSeconds}s`,
    `  timeout server ${settings.requestTimeoutSeconds}s`,
    `  timeout queue ${settings.requestTimeoutSeconds}s`,
    `  timeout http-request ${settings.headersTimeoutSeconds}s`,
    `  timeout http-keep-alive ${settings.idleTimeoutSeconds}s`,
    // Idle WebSockets are normal: TCP keep-alive finds dead peers instead.
    '  timeout tunnel 24h',
    '',
  ];
}

/**
 * Bind lines of the listeners, and the TLS one. The plain listeners speak HTTP/1 only (`proto
 * h1`), as the Node plane: by default HAProxy takes a client's HTTP/2 preface as prior-knowledge
 * h2c and answers in HTTP/2 frames, where the Node plane answers 400 (found by the fuzz test). strict-sni: a handshake is accepted only for a
 * name a crt-list line filters for (the public hosts with a certificate), never falling back to
 * the default certificate, which is a placeholder no client asks for; TLS 1.2 and 1.3 only (2.6
 * sets no maximum below 1.3); HTTP/2 where the client offers it.
 */
const bindLines = (input: HaproxyConfigInput): string[] => [
  ...input.listeners.map((listener) => `  bind ${bindAddress(listener)} name ${listener.name} proto h1`),
  ...(input.tls === undefined
    ? []
    : [`  bind ${bindAddress({ ...input.tls, name: 'public' })} name https ssl crt-list ${input.tls.crtList} strict-sni ssl-min-ver TLSv1.2 alpn h2,http/1.1`]),
];

/**
 * HSTS, as the Node plane's TLS listener sends it: over TLS, for the public hosts (routed hosts one
 * label under the public domain; `[.]` because HAProxy's parser eats backslashes).
 */
const hstsLines = (tls: TlsBind | undefined): string[] =>
  tls?.hstsMaxAgeSeconds === undefined
    ? []
    : [`  http-response set-header strict-transport-security max-age=${tls.hstsMaxAgeSeconds} if { ssl_fc } routed { var(txn.host) -m reg ^[^.]+[.]${tls.domain.replace(/\./g, '[.]')}$ }`];

/**
 * With an internal listener, the public one routes no internal host (it falls through to the Node
 * server, which answers 404) and tells the Node server which listener a request came in on, so it
 * answers the gateway's own endpoints there only for the gateway's own address.
 */
function listenerRules(input: HaproxyConfigInput): string[] {
  const rules = [`  http-request del-header ${LISTENER_HEADER}`];
  if (!input.listeners.some((listener) => listener.name === 'internal')) return rules;
  return [
    ...rules,
    '  acl public_listener so_name public https',
    `  http-request set-header ${LISTENER_HEADER} public if public_listener`,
    `  http-request unset-var(txn.backend) if public_listener { var(txn.host) -m end .${input.internalDomain} }`,
  ];
}

/**
 * Connections beyond this many over `--max-connections` wait in the kernel's queue instead of
 * being answered 503: each answered one holds a connection's memory until it closes.
 */
const CAP_HEADROOM = 256;

/**
 * The connection caps, answered as the Node plane answers them (connection-limits.ts): 503, JSON
 * naming the cap, Retry-After, and the connection closed. HAProxy sees a connection's request
 * before it answers, where the Node plane answers at the connection.
 */
function capRules(settings: HaproxySettings): string[] {
  const refusal = (message: string, condition: string): string =>
    `  http-request return status 503 content-type "application/json; charset=utf-8" hdr retry-after ${REFUSED_RETRY_AFTER_SECONDS} hdr connection close lf-string "${refusalBody(message).replace(/"/g, '\\"')}" if ${condition}`;
  return [
    refusal(totalCapMessage('gateway', settings.maxConnections), `{ fe_conn gt ${settings.maxConnections} }`),
    refusal(addressCapMessage('gateway', '%[src]', settings.maxConnectionsPerAddress), `{ sc0_conn_cur gt ${settings.maxConnectionsPerAddress} }`),
  ];
}

/**
 * A request target that is not origin-form is answered 400 as the Node plane answers it
 * (request-head.ts), before anything routes by it. HTTP/1 only: HAProxy holds an HTTP/2 request's
 * target in absolute form (scheme and authority), and sends it to units in origin form.
 */
function notOriginFormLines(): string[] {
  const condition = '!{ url_beg / } !{ url * } { req.ver 1.0 1.1 }';
  const answer = (html: boolean): string =>
    `  http-request return status 400 content-type "${html ? 'text/html' : 'application/json'}; charset=utf-8" hdr cache-control no-store ` +
    `lf-string "${logFormatText(renderError(NOT_ORIGIN_FORM, html).body)}" if ${condition}`;
  return [`${answer(true)} { req.hdr(accept) -m sub text/html }`, answer(false)];
}

/**
 * Lines for the gateway's latency figures (haproxy-traffic-log.ts): the route its backend serves
 * (the routes map, as the error answers read it) and %Ta in milliseconds, for one routed request in
 * `sampleEvery` (HAProxy's log sampling: the first of every `sampleEvery` lines). `len` bounds a
 * line; no syslog header (`format raw`). Requests the Node server answers are counted there, so
 * they log nothing: HAProxy builds a line for every request it logs, even those sampling then drops.
 */
function trafficLogLines({ trafficLog, files }: HaproxyConfigInput): string[] {
  if (trafficLog === undefined) return [];
  const sample = trafficLog.sampleEvery > 1 ? ` sample 1:${trafficLog.sampleEvery}` : '';
  return [`  log 127.0.0.1:${trafficLog.port} len 256 format raw${sample} local0 info`, `  log-format "%[be_name,field(1,.),map_str(${files.routesMap})] %Ta"`, '  option dontlognull'];
}

function frontendSection(input: HaproxyConfigInput): string[] {
  const { settings, files } = input;
  return [
    'frontend gateway',
    ...bindLines(input),
    ...trafficLogLines(input),
    `  stick-table type ipv6 size 100k expire ${settings.idleTimeoutSeconds}s store conn_cur`,
    '  tcp-request connection track-sc0 src',
    ...capRules(settings),
    `  http-request return status 431 content-type "text/plain; charset=utf-8" string "request head too large\\n" if { req.hdrs,length gt ${settings.maxHeaderSize} }`,
    ...notOriginFormLines(),
    // The Host without :port or a trailing dot, in lower case: the key of the hosts map. The regsub
    // runs only for the rare Host that ends in a dot.
    '  http-request set-var(txn.host) req.hdr(host),host_only,lower',
    '  http-request set-var(txn.host) var(txn.host),regsub([.]$,) if { var(txn.host) -m end . }',
    `  http-request set-var(txn.backend) var(txn.host),map_str(${files.hostsMap})`,
    ...listenerRules(input),
    // The Node server (tls/) answers ACME's HTTP-01 challenges for any host, and on plain HTTP the
    // 308s to HTTPS when asked to (it knows which hosts are public), so those requests are not routed here.
    '  http-request unset-var(txn.backend) if { path_beg /.well-known/acme-challenge/ }',
    ...(input.httpsRedirectDomain === undefined ? [] : [`  http-request unset-var(txn.backend) if !{ ssl_fc } { var(txn.host) -m end .${input.httpsRedirectDomain} }`]),
    '  acl routed var(txn.backend) -m found',
    ...(input.trafficLog === undefined ? [] : ['  http-request set-log-level silent unless routed']),
    `  acl loopback src ${LOOPBACK_SOURCES}`,
    // Headers a Connection header names are hop-by-hop too (RFC 9110 §7.6.1); HAProxy drops only its own. Before the
    // X-Forwarded-* rules: a client naming them must not remove what the gateway sets (a unit would take it for a local caller).
    `  acl names_headers req.fhdr(connection) -m reg -i ${NAMES_HEADERS}`,
    '  http-request lua.drop-connection-named if routed names_headers',
    // X-Forwarded-For extended as the Node plane does (one header, the client last). Requests for
    // the gateway's own endpoints from this machine stay local calls (no X-Forwarded-For). The
    // header count is taken once, for the requests that get the header (each count is a header scan).
    '  http-request set-var(txn.xff_count) req.fhdr_cnt(x-forwarded-for) if routed || !loopback',
    '  http-request set-header x-forwarded-for "%[req.fhdr(x-forwarded-for)], %[src]" if { var(txn.xff_count) -m int 1 }',
    '  http-request add-header x-forwarded-for %[src] if { var(txn.xff_count) -m found } !{ var(txn.xff_count) -m int 1 }',
    '  http-request set-header x-forwarded-proto %[ssl_fc,iif(https,http)] if routed',
    '  http-request set-header x-forwarded-host %[req.hdr(host)] if routed',
    // Hop-by-hop headers and the client's claims, in one pass over the headers each way (HAProxy's header names are lower case).
    `  http-request del-header ^(${REQUEST_DROPPED.join('|')})$ -m reg if routed`,
    `  acl response_names_headers res.fhdr(connection) -m reg -i ${NAMES_HEADERS}`,
    '  http-response lua.drop-connection-named-response if response_names_headers',
    `  http-response del-header ^(${RESPONSE_HOP_BY_HOP.join('|')})$ -m reg`,
    `  http-response del-header ${UNREACHABLE_HEADER} if { status 503 }`,
    `  http-after-response set-status 502 if { status 503 } { res.hdr(${UNREACHABLE_HEADER}) -m found }`,
    `  http-after-response del-header ${UNREACHABLE_HEADER} if { status 502 }`,
    ...hstsLines(input.tls),
    '  use_backend %[var(txn.backend)].%[thread] if routed',
    // Unknown hosts and the gateway's own endpoints: the Node server answers them as the Node plane does.
    '  default_backend own',
    '',
  ];
}

/** A pool backend as one copy per HAProxy thread (threadBackendName), each with the thread's share of a unit's connections. */
function backendSections(backend: BackendConfig, input: HaproxyConfigInput): string[] {
  const { threads, upstreamConnections } = input.settings;
  return Array.from({ length: threads }, (_, thread) => backendSection(backend, threadBackendName(backend.name, thread), threadShare(upstreamConnections, threads), input)).flat();
}

function backendSection(backend: BackendConfig, name: string, maxconn: number, input: HaproxyConfigInput): string[] {
  const { settings, files } = input;
  const idempotent = '{ method GET HEAD OPTIONS PUT DELETE }';
  const noUnit = (html: boolean): string =>
    `  http-request return status 503 content-type "${html ? 'text/html' : 'application/json'}; charset=utf-8" hdr retry-after ${RETRY_AFTER_SECONDS} hdr cache-control no-store lf-string "${noUnitBody(files, html)}" if { nbsrv() eq 0 } !{ stopping }`;
  return [
    `backend ${name}`,
    '  balance leastconn',
    '  retries 1',
    '  option redispatch 1',
    '  retry-on conn-failure empty-response',
    `  http-request disable-l7-retry unless ${idempotent}`,
    `${noUnit(true)} { req.hdr(accept) -m sub text/html }`,
    noUnit(false),
    unitErrorLine(502, settings, files),
    unitErrorLine(502, settings, files, 503),
    unitErrorLine(504, settings, files),
    ...backend.slots.map((slot, index) =>
      slot.address === undefined
        ? `  server ${slotName(backend.name, index)} 127.0.0.1:1 disabled maxconn ${maxconn}`
        : `  server ${slotName(backend.name, index)} ${serverAddress(slot.address)} maxconn ${maxconn}`,
    ),
    '',
  ];
}

export function haproxyConfig(input: HaproxyConfigInput): string {
  return [
    '# Written by the platform gateway (src/roles/gateway/haproxy-config.ts); changes are overwritten.',
    ...globalSection(input),
    ...frontendSection(input),
    'backend own',
    // The Node server may close an idle keep-alive connection as HAProxy reuses it.
    '  retries 1',
    '  retry-on conn-failure empty-response',
    `  http-request disable-l7-retry unless { method GET HEAD OPTIONS PUT DELETE }`,
    `  server own 127.0.0.1:${input.ownPort}`,
    '',
    ...input.backends.flatMap((backend) => backendSections(backend, input)),
  ].join('\n');
}

/**
 * Lua actions that drop the headers a Connection header names, and the names from Connection
 * (HAProxy itself handles close, keep-alive and upgrade, and leaves the rest in place). They run
 * only for messages whose Connection header names another header (NAMES_HEADERS), which is rare:
 * running Lua on every `Connection: keep-alive` doubled HAProxy's CPU time per request.
 */
export const connectionHeadersLua = `-- Written by the platform gateway (src/roles/gateway/haproxy-config.ts).
local standard = { ["close"] = true, ["keep-alive"] = true, ["upgrade"] = true }

local function strip(get, delete, set)
  local values = get()["connection"]
  if values == nil then return end
  local kept = {}
  local named = false
  for _, value in pairs(values) do
    for token in string.gmatch(value, "[^,%s]+") do
      local name = string.lower(token)
      if standard[name] then kept[#kept + 1] = name else named = true; delete(name) end
    end
  end
  if not named then return end
  delete("connection")
  if #kept > 0 then set("connection", table.concat(kept, ", ")) end
end

core.register_action("drop-connection-named", { "http-req" }, function(txn)
  strip(function() return txn.http:req_get_headers() end, function(name) txn.http:req_del_header(name) end, function(name, value) txn.http:req_set_header(name, value) end)
end)

core.register_action("drop-connection-named-response", { "http-res" }, function(txn)
  strip(function() return txn.http:res_get_headers() end, function(name) txn.http:res_del_header(name) end, function(name, value) txn.http:res_set_header(name, value) end)
end)
`;

/** The hosts map file: one `host backend` line per routed host. */
export const hostsMapFile = (hosts: ReadonlyMap<string, string>): string => [...hosts].map(([host, backend]) => `${host} ${backend}\n`).join('');

/** The units map file: `<slot> <unit>` for every slot (`-` when free), so `set map` always finds its key. */
export const unitsMapFile = (backends: readonly BackendConfig[]): string =>
  backends.flatMap((backend) => backend.slots.map((slot, index) => `${slotName(backend.name, index)} ${slot.unit ?? '-'}\n`)).join('');

/** The routes map file: `<backend> <route label>` for every backend of the pool, so `set map` always finds its key. */
export const routesMapFile = (backends: readonly BackendConfig[]): string => backends.map((backend) => `${backend.name} ${backend.label}\n`).join('');
