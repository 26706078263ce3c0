import { Type, type Static } from '@sinclair/typebox';
import { ErrorReply, errorResponses } from './common.js';
import { ServiceGlob, TokenName, TokenRole } from './token.js';

// Dashboard sessions (docs/access.md "Access tokens", docs/dashboard.md): a token exchanged for a signed,
// HttpOnly cookie, the page's view of who it acts as, and signing out.

export const SessionStart = Type.Object(
  { token: Type.String({ minLength: 1, maxLength: 256, description: 'a token secret (plt_ and 43 characters)' }) },
  { additionalProperties: false },
);

export const SessionInfo = Type.Object({
  via: Type.Union([Type.Literal('session'), Type.Literal('token'), Type.Literal('none')], {
    description: 'how this call was let in: a session cookie, an Authorization header, or no token needed (a local call under --auth auto, or --auth none)',
  }),
  token: Type.Optional(
    Type.Object({
      name: TokenName,
      role: TokenRole,
      services: Type.Optional(ServiceGlob),
      expiresAt: Type.Optional(Type.String({ format: 'date-time' })),
    }),
  ),
  expiresAt: Type.Optional(Type.String({ format: 'date-time', description: 'when the session ends' })),
});
export type SessionInfo = Static<typeof SessionInfo>;

export const SessionStarted = Type.Object({
  ...SessionInfo.properties,
  proof: Type.String({
    description: 'the half of the session the page keeps (in storage of its own origin) and sends as X-Platform-Session-Proof beside the cookie',
  }),
});
export type SessionStarted = Static<typeof SessionStarted>;

export const startSessionSchema = {
  description:
    'Sign in: exchange a token for a session cookie (HttpOnly, SameSite=Strict, Secure over HTTPS) lasting 12 h or until the token expires, ' +
    'and its proof, which every call of the session sends as X-Platform-Session-Proof: the cookie alone is no credential.',
  body: SessionStart,
  response: { 200: SessionStarted, 401: ErrorReply, 403: ErrorReply, 429: ErrorReply, ...errorResponses },
};

export const sessionSchema = {
  description: 'Who the caller acts as: the token of its session or Authorization header, or none needed. 401 when a token is needed and none is given.',
  response: { 200: SessionInfo, 401: ErrorReply, ...errorResponses },
};

export const endSessionSchema = {
  description:
    'Sign out: the session ends everywhere and its cookie is cleared; 429 when its token has too many signed-out sessions that have not expired yet.',
  response: { 204: Type.Null(), 403: ErrorReply, 429: ErrorReply },
};

/** A sign-out record (/platform/ended-sessions/<id>): kept until the session would have ended (src/auth/ended-sessions.ts). */
export const EndedSessionRecord = Type.Object(
  { token: Type.String(), endsAt: Type.String({ format: 'date-time' }) },
  { additionalProperties: false, description: "the signed-out session's token and when it would have ended" },
);
export type EndedSessionRecord = Static<typeof EndedSessionRecord>;
