import { Type, type Static } from '@sinclair/typebox';
import { ErrorReply, errorResponses, literalUnion } from './common.js';
import { ServiceGlob } from './token.js';
import { deliveryStates, notifyEventNames, type DeliveryState, type NotifyEventName as EventName } from './notification-words.js';

export { deliveryStates, notifyEventNames, type DeliveryState };
export type NotifyEventName = EventName;

// Outbound notifications (docs/notifications.md): endpoints admins register, the events they
// receive, and the deliveries the leading scheduler made. An endpoint's secret is shown once, when
// it is added; listings never carry it.


/** A string enum, not a union of literals: a wrong name is then told as "must be one of …", naming them. */
export const NotifyEventName = Type.Unsafe<EventName>({ type: 'string', enum: [...notifyEventNames], description: `one of ${notifyEventNames.join(', ')}` });

/** What a receiver gets, as the JSON body of a POST. */
export const NotificationEvent = Type.Object({
  id: Type.String({ description: 'the same for every retry of the event: receivers deduplicate by it' }),
  event: NotifyEventName,
  /** The service the event concerns; null for a machine's. */
  service: Type.Union([Type.String(), Type.Null()]),
  timestamp: Type.String({ format: 'date-time' }),
  details: Type.Record(Type.String(), Type.Union([Type.String(), Type.Number(), Type.Array(Type.String())])),
  /** One line for people: Slack's incoming webhooks show it. */
  text: Type.String(),
});
export type NotificationEvent = Static<typeof NotificationEvent>;

export const EndpointId = Type.String({ pattern: '^[0-9a-f]{12}$', description: '12 hex digits, as `notify list` shows' });

/**
 * http or https, with no user:password@ (the secret signs each delivery). The pattern checks the
 * scheme and the authority; the route parses the rest.
 */
export const EndpointUrl = Type.String({
  pattern: '^https?://[^/?#@\\s]+([/?#]\\S*)?$',
  maxLength: 2000,
  description: 'an http:// or https:// URL without credentials (no user:password@), of at most 2000 characters',
  examples: ['https://hooks.slack.com/services/T000/B000/XXXX'],
});

/** An endpoint as listed: never its secret. */
export const NotifyEndpoint = Type.Object({
  id: EndpointId,
  url: Type.String(),
  services: Type.Optional(ServiceGlob),
  /** The events it receives; absent: every event, including ones added later. */
  events: Type.Optional(Type.Array(NotifyEventName)),
  createdAt: Type.String({ format: 'date-time' }),
});
export type NotifyEndpoint = Static<typeof NotifyEndpoint>;

/** What the store holds: the endpoint and the secret deliveries are signed with. */
export type NotifyEndpointRecord = NotifyEndpoint & { secret: string };

export const NotifyEndpointCreate = Type.Object(
  {
    url: EndpointUrl,
    services: Type.Optional(ServiceGlob),
    events: Type.Optional(Type.Array(NotifyEventName, { minItems: 1, maxItems: notifyEventNames.length, uniqueItems: true })),
  },
  { additionalProperties: false },
);
export type NotifyEndpointCreate = Static<typeof NotifyEndpointCreate>;

export const NotifyEndpointCreated = Type.Object({
  endpoint: NotifyEndpoint,
  secret: Type.String({ description: 'the HMAC-SHA256 key of X-Platform-Signature-256; shown this once' }),
});


/** One event on its way to one endpoint: `pending` until a 2xx (`delivered`) or until it is given up (`failed`). */
export const NotifyDelivery = Type.Object({
  event: NotificationEvent,
  endpoint: EndpointId,
  /** The endpoint's URL when the delivery was made (admins only read it: a Slack URL's path is a secret). */
  url: Type.String(),
  state: literalUnion(deliveryStates),
  attempts: Type.Integer(),
  createdAt: Type.String({ format: 'date-time' }),
  updatedAt: Type.String({ format: 'date-time' }),
  /** When the next attempt is due, while pending. */
  nextAttemptAt: Type.Optional(Type.String({ format: 'date-time' })),
  /** The HTTP status of the last attempt that got an answer. */
  statusCode: Type.Optional(Type.Integer()),
  /** Why the last attempt failed (or why the delivery was given up). */
  error: Type.Optional(Type.String()),
});
export type NotifyDelivery = Static<typeof NotifyDelivery>;

const adminErrors = { 401: ErrorReply, 403: ErrorReply, ...errorResponses };

export const addEndpointSchema = {
  description: 'Register a notification endpoint (admin). The reply carries its signing secret, shown this once.',
  body: NotifyEndpointCreate,
  response: { 201: NotifyEndpointCreated, ...adminErrors },
};

export const listEndpointsSchema = {
  description: 'Every notification endpoint (admin): URLs, filters, dates. Never a secret.',
  response: { 200: Type.Array(NotifyEndpoint), ...adminErrors },
};

export const removeEndpointSchema = {
  description: 'Remove a notification endpoint (admin): its pending deliveries are given up.',
  params: Type.Object({ id: EndpointId }),
  response: { 204: Type.Null(), ...adminErrors },
};

export const listDeliveriesSchema = {
  description:
    'Recent deliveries, newest first, with the status code and error of their last attempt (admin: they show endpoint URLs). ' +
    'Finished deliveries are kept for 7 days, at most 1,000.',
  querystring: Type.Object(
    {
      limit: Type.Integer({ minimum: 1, maximum: 1000, default: 100 }),
      state: Type.Optional(literalUnion(deliveryStates)),
    },
    { additionalProperties: false },
  ),
  response: { 200: Type.Array(NotifyDelivery), ...adminErrors },
};
