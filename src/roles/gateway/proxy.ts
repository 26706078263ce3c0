import type { IncomingMessage, ServerResponse } from 'node:http';
import { hostName, isServiceHost, type Domains } from '../../http/host-name.js';
import { chooseUpstream } from './upstream-choice.js';
import { clientAddress, schemeOf, upstreamRequestHeaders } from './forwarded-headers.js';
import { ProxyExchange, type ExchangeSettings } from './proxy-exchange.js';
import { headerValue, hasBody, isOriginForm, NOT_ORIGIN_FORM } from './request-head.js';
import { sendError } from './gateway-error.js';
import { unroutedMetrics } from './gateway-metrics.js';
import type { Route, RouteTable } from './route-table.js';
import { answersOwn, routesHost, type ListenerPolicy } from './listener-policy.js';

// The gateway's request path: Host → route → unit → exchange. Everything it needs per request is
// precomputed in the route table (one Map lookup by host name).

export interface ProxyOptions extends ExchangeSettings {
  domains: Domains;
}

/** Seconds a client is asked to wait when a service has no healthy unit. */
export const RETRY_AFTER_SECONDS = 2;

/** What the gateway answers itself, on a host that is not a service host (its own address, say). */
const ownPaths = ['/healthz', '/readyz', '/metrics', '/routes', '/traffic', '/documentation'];
const isOwnPath = (url: string): boolean => ownPaths.some((path) => url === path || url.startsWith(`${path}/`) || url.startsWith(`${path}?`));

export class GatewayProxy {
  constructor(
    private readonly table: RouteTable,
    private readonly options: ProxyOptions,
  ) {}

  /** Answers 400 to a request whose target is not origin-form (before anything else looks at the target); true when it did. */
  refused(req: IncomingMessage, res: ServerResponse): boolean {
    if (isOriginForm(req.url ?? '')) return false;
    unroutedMetrics.answered(NOT_ORIGIN_FORM.status);
    sendError(req, res, NOT_ORIGIN_FORM);
    return true;
  }

  /** Proxies or answers the request; false when it is for the gateway's own endpoints. */
  handle(req: IncomingMessage, res: ServerResponse, policy: ListenerPolicy): boolean {
    const rawHost = headerValue(req.rawHeaders, 'host');
    const host = hostName(rawHost);
    const route = routesHost(policy, host, this.options.domains) ? this.table.lookup(host) : undefined;
    if (route === undefined) {
      if (!isServiceHost(host, this.options.domains) && isOwnPath(req.url ?? '/') && answersOwn(policy, host)) return false;
      unroutedMetrics.answered(404);
      sendError(req, res, { status: 404, message: `no service is reachable at ${host === '' ? 'a request without a Host header' : host}` });
      return true;
    }
    const send = () => this.forward(req, res, route, rawHost ?? host);
    const now = Date.now();
    if (route.heldUntil === undefined || route.heldUntil <= now) send();
    else if (!route.held.hold(res, route.heldUntil, send)) {
      route.metrics.answered(503);
      sendError(req, res, { status: 503, message: `service ${route.name} is being handed over and holds ${route.held.size} requests already`, retryAfter: RETRY_AFTER_SECONDS });
    }
    return true;
  }

  /** Sends the request to one of the route's units, or answers 503 when it has none. */
  private forward(req: IncomingMessage, res: ServerResponse, route: Route, host: string): void {
    const index = chooseUpstream(route.upstreams, route.cursor, Date.now());
    if (index === -1) {
      noHealthyUnit(req, res, route);
      return;
    }
    route.cursor = index + 1;
    const headers = upstreamRequestHeaders(req.rawHeaders, { clientAddress: clientAddress(req.socket.remoteAddress), host, proto: schemeOf(req) });
    new ProxyExchange(this.options, route, req, res, headers, hasBody(req.rawHeaders) ? req : null).send(route.upstreams[index]!);
  }
}

export function noHealthyUnit(req: IncomingMessage, res: ServerResponse, route: Route): void {
  route.metrics.answered(503);
  sendError(req, res, { status: 503, message: `${route.kind} ${route.name} has no healthy unit`, retryAfter: RETRY_AFTER_SECONDS });
}
