import t from 'tap';
import { createHmac, randomBytes } from 'node:crypto';
import {
  checkSession,
  cookieValue,
  openSession,
  sealSession,
  sessionClaims,
  sessionCookie,
  sessionProof,
  SESSION_MAX_AGE_MS,
  type SessionClaims,
} from '../../src/auth/session.js';
import { csrfRefusal } from '../../src/auth/csrf.js';
import { passedOnAuthorization, sessionCredential } from '../../src/auth/caller.js';
import { hashSecret, newSecret } from '../../src/auth/tokens.js';
import type { TokenRecord } from '../../src/schemas/token.js';

const key = randomBytes(32);
const now = Date.parse('2030-01-01T00:00:00Z');
const viewer: TokenRecord = { name: 'viewer', role: 'read', createdAt: '2029-01-01T00:00:00Z', hash: hashSecret(newSecret()) };
const find = (name: string) => (name === viewer.name ? viewer : undefined);
const live = () => false;
/** A session as the dashboard's page presents it: the cookie's value and its proof. */
const presented = (claims: SessionClaims) => ({ value: sealSession(key, claims), proof: sessionProof(key, claims) });

t.test('a session lasts 12 hours, or until its token expires when that is sooner', async (t) => {
  t.equal(sessionClaims(viewer, now).expiresAt, now + SESSION_MAX_AGE_MS);
  t.equal(sessionClaims({ ...viewer, expiresAt: '2030-01-01T01:00:00Z' }, now).expiresAt, now + 3_600_000);
});

t.test('a sealed session opens with its key only, and any change to it breaks the seal', async (t) => {
  const claims = sessionClaims(viewer, now);
  const sealed = sealSession(key, claims);
  t.same(openSession(key, sealed), claims);
  t.notOk(sealed.includes(viewer.hash), 'the cookie carries a prefix of the hash, not the hash');
  t.equal(openSession(randomBytes(32), sealed), undefined, 'another key');
  const [payload, signature] = sealed.split('.');
  const forged = Buffer.from(JSON.stringify({ t: 'root', h: claims.hash, e: claims.expiresAt })).toString('base64url');
  t.equal(openSession(key, `${forged}.${signature}`), undefined, 'another payload under the same signature');
  t.equal(openSession(key, `${payload}.`), undefined);
  t.equal(openSession(key, `${sealed}.x`), undefined);
  t.equal(openSession(key, 'garbage'), undefined);
});

t.test('a session stands for its token until it ends, the token is revoked, reissued or expires', async (t) => {
  const sealed = presented(sessionClaims(viewer, now));
  t.same(checkSession(key, sealed, find, live, now + 1000), { token: viewer });
  t.match(checkSession(key, sealed, find, live, now + SESSION_MAX_AGE_MS), { refused: /^the session ended at 2030-01-01T12:00:00.000Z/ });
  t.same(checkSession(key, sealed, () => undefined, live, now), { refused: 'the session ended: token viewer was revoked', proven: true });
  const reissued = () => ({ ...viewer, hash: hashSecret(newSecret()) });
  const revoked = { refused: 'the session ended: token viewer was revoked', proven: true };
  t.same(checkSession(key, sealed, reissued, live, now), revoked, 'a new token of the same name is another token');
  const expiring = { ...viewer, expiresAt: '2030-01-01T00:00:10Z' };
  t.match(checkSession(key, presented(sessionClaims(viewer, now)), () => expiring, live, now + 20_000), { refused: /token viewer expired/ });
  t.match(checkSession(key, { value: 'x.y', proof: undefined }, find, live, now), { refused: /not one this platform signed/ });
});

t.test('a signed-out session is refused, and only that one', async (t) => {
  const claims = sessionClaims(viewer, now);
  const other = sessionClaims(viewer, now);
  t.not(claims.id, other.id, 'each sign-in is its own session');
  t.match(claims.id, /^[A-Za-z0-9_-]{22}$/);
  const ended = (id: string) => id === claims.id;
  t.same(checkSession(key, presented(claims), find, ended, now), { refused: 'the session was signed out: sign in again', proven: true });
  t.same(checkSession(key, presented(other), find, ended, now), { token: viewer });
  const idless = Buffer.from(JSON.stringify({ t: 'viewer', h: claims.hash, e: claims.expiresAt })).toString('base64url');
  t.equal(openSession(key, `${idless}.${createHmac('sha256', key).update(idless).digest('base64url')}`), undefined, 'a session without an id (made before sign-out ended sessions) is not one');
});

t.test('the cookie alone is no session: without its proof, or with another session\'s, it is refused and not cleared', async (t) => {
  const claims = sessionClaims(viewer, now);
  const value = sealSession(key, claims);
  const refusal = {
    refused: /^the session cookie alone is not a credential: the dashboard's page sends its proof \(x-platform-session-proof\)/,
    proven: false,
  };
  t.match(checkSession(key, { value, proof: undefined }, find, live, now), refusal, 'no proof');
  t.match(checkSession(key, { value, proof: sessionProof(key, sessionClaims(viewer, now)) }, find, live, now), refusal, "another session's proof");
  t.match(checkSession(key, { value, proof: sessionProof(randomBytes(32), claims) }, find, live, now), refusal, "another key's proof");
  const cookieMac = createHmac('sha256', key).update(value.split('.')[0]!).digest('base64url');
  t.match(checkSession(key, { value, proof: cookieMac }, find, live, now), refusal, "the cookie's own MAC");
  t.same(checkSession(key, { value, proof: sessionProof(key, claims) }, find, live, now), { token: viewer });
});

t.test('the cookie is HttpOnly, SameSite=Strict, for the whole site, Secure only over HTTPS; 0 clears it', async (t) => {
  t.equal(sessionCookie('abc', 3_600_000, false), 'platform_session=abc; Path=/; Max-Age=3600; HttpOnly; SameSite=Strict');
  t.equal(sessionCookie('', 0, true), 'platform_session=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict; Secure');
  t.equal(cookieValue('a=1; platform_session=xyz.sig; b=2', 'platform_session'), 'xyz.sig');
  t.equal(cookieValue('platform_session_other=1', 'platform_session'), undefined);
  t.same(sessionCredential({ cookie: 'platform_session=v' }), { value: 'v', proof: undefined, from: 'cookie' });
  const proven = { cookie: 'platform_session=v', 'x-platform-session-proof': 'p' };
  t.same(sessionCredential(proven), { value: 'v', proof: 'p', from: 'cookie' }, 'the page sends the proof');
  const passedOn = { authorization: 'Session v p', cookie: 'platform_session=w' };
  t.same(sessionCredential(passedOn), { value: 'v', proof: 'p', from: 'header' }, 'a role passes a session on as a header');
  t.same(passedOnAuthorization({ cookie: 'platform_session=v', 'x-platform-session-proof': 'p' }), 'Session v p', 'with its proof');
  t.equal(sessionCredential({ authorization: 'Bearer plt_x' }), undefined);
});

t.test('a change from a browser must come from this origin and send JSON; the CLI and webhooks are not held to it', async (t) => {
  const host = '127.0.0.1:9000';
  const own = 'http://127.0.0.1:9000';
  const json = 'application/json';
  const cookie = 'platform_session=v';
  const refusal = (method: string, headers: Record<string, string>, allowed: string[] = []) => csrfRefusal({ method, headers: { host, ...headers } }, allowed);
  t.equal(refusal('POST', { origin: own, 'content-type': json, cookie }), undefined);
  t.equal(refusal('DELETE', { origin: own, cookie }), undefined, 'no body, no content type needed');
  t.equal(refusal('GET', { origin: 'http://evil.example', cookie }), undefined, 'reads are not changes');
  t.equal(refusal('POST', { 'content-type': 'text/plain' }), undefined, 'no Origin, no cookie: no browser (a webhook, a script)');
  t.equal(refusal('POST', { origin: 'http://evil.example', authorization: 'Bearer plt_x', 'content-type': 'text/plain' }), undefined, 'a bearer token is no ambient credential');
  t.match(refusal('POST', { origin: 'http://127.0.0.1:9999', 'content-type': json, cookie }), /must come from a page of this server \(127.0.0.1:9000\), not http:\/\/127.0.0.1:9999/);
  t.match(refusal('POST', { origin: 'null', 'content-type': json }), /not null/, 'a sandboxed page, even without a cookie');
  t.match(refusal('POST', { 'content-type': json, cookie }), /must carry an Origin header/);
  t.match(refusal('POST', { origin: own, 'content-type': 'application/x-www-form-urlencoded', cookie }), /must send Content-Type: application\/json, not application\/x-www-form-urlencoded/);
  t.match(refusal('POST', { origin: own, 'content-type': 'text/plain;charset=UTF-8' }), /application\/json/, 'a same-origin form is no JSON call either');
  t.match(refusal('PATCH', { origin: own, 'content-length': '12', cookie }), /must send Content-Type: application\/json$/);
  t.equal(refusal('POST', { origin: 'https://ops.example.com', 'content-type': 'application/json; charset=utf-8', cookie }, ['https://ops.example.com']), undefined, '--cors-origin');
});
