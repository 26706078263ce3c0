import t, { type Test } from 'tap';
import { createServer, type Server } from 'node:http';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { startEtcd } from '../harness/etcd.js';
import { startDockerd } from '../harness/docker.js';
import { startRegistry } from '../harness/registry.js';
import { buildTestImage } from '../harness/test-image.js';
import { freePort } from '../harness/free-port.js';
import { http, serveRole } from '../harness/platform.js';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, fetch as undiciFetch } from 'undici';
import { buildDashboard, launchChromium, screenshotDir } from '../browser/chromium.js';

// Signing in to the dashboard in a real browser, against a platform whose every role runs under
// --auth token: without a session the page shows the sign-in form and the API gives no data; an
// admin signs in and deploys; a read token sees Deploy, Roll back and Delete off and is refused
// by the API anyway; a page of another origin cannot make a change with the session; the web role
// takes the same session; revoking the token ends its session; signing out ends it too.
// Screenshots go to test-output/screenshots/.

buildDashboard();
mkdirSync(screenshotDir, { recursive: true });

const hex = () => randomBytes(3).toString('hex');
const engine = await startDockerd();
const registry = await startRegistry();
const repository = `signin/app-${hex()}`;
await buildTestImage(engine.docker, registry.host, repository, 'latest', { label: 'one' });
const browser: Browser = await launchChromium();

const etcd = await startEtcd();
const flags = ['--etcd', etcd.url, '--announce-ttl', '3', '--auth', 'token'];
const otherPort = await freePort();
const otherOrigin = `http://127.0.0.1:${otherPort}`;
const directory = await serveRole('directory', await freePort(), flags);
const scheduler = await serveRole('scheduler', await freePort(), flags);
const orchestrator = await serveRole('orchestrator', await freePort(), flags);
const agent = await serveRole('agent', await freePort(), [...flags, '--network', 'host', '--machine-id', `signin-${hex()}`, '--stop-grace', '1'], { DOCKER_HOST: engine.dockerHost });
const web = await serveRole('web', await freePort(), flags);
// A second orchestrator that lets the other origin's pages call it.
const corsOrchestrator = await serveRole('orchestrator', await freePort(), [...flags, '--cors-origin', otherOrigin]);

// "Another origin": a page on another port serving a form that posts to the orchestrator.
const service = `signin-${hex()}`;
/** The Cookie headers the other site received: it stands for a unit published on the dashboard's host too. */
const cookiesReceived: string[] = [];
const otherSite: Server = createServer((request, response) => {
  if (request.headers.cookie !== undefined) cookiesReceived.push(request.headers.cookie);
  response.setHeader('content-type', 'text/html; charset=utf-8');
  response.end(`<!doctype html><title>elsewhere</title>
<form id="attack" method="post" action="${orchestrator.url}/services/${service}/deploy" enctype="text/plain">
  <input name='{"a":"' value='"}'><button>Deploy it</button>
</form>`);
});
await new Promise<void>((resolve) => otherSite.listen(otherPort, '127.0.0.1', resolve));

t.teardown(async () => {
  await browser.close().catch(() => undefined);
  otherSite.close();
  await Promise.all([directory, scheduler, agent, web, orchestrator, corsOrchestrator].map((role) => role.stop()));
  await etcd.stop();
  await registry.stop();
  await engine.stop();
});

const bearer = (secret: string) => ({ authorization: `Bearer ${secret}` });
const bootstrap = await http('POST', `${orchestrator.url}/tokens/bootstrap`);
const admin = bootstrap.body.secret as string;
const viewer = (await http('POST', `${orchestrator.url}/tokens`, { name: 'viewer', role: 'read' }, bearer(admin))).body.secret as string;
const declared = await http('POST', `${orchestrator.url}/services`, { name: service, description: 'signed in', containerRepository: `${registry.host}/${repository}:latest`, numInstances: 1, loadBalanced: true, publicFacing: false }, bearer(admin));
if (declared.status !== 201) throw new Error(`declaring ${service}: ${JSON.stringify(declared.body)}`);

const pageErrors: string[] = [];
const shot = (page: Page, name: string) => page.screenshot({ path: join(screenshotDir, `${name}.png`), fullPage: true });

/** A fresh browser profile (its own cookies) with one page open at `url`. */
async function freshPage(url: string): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  page.setDefaultTimeout(20_000);
  page.on('pageerror', (error) => pageErrors.push(error.message));
  await page.goto(url);
  return { context, page };
}

async function signIn(page: Page, secret: string): Promise<void> {
  await page.getByRole('heading', { level: 1, name: 'Sign in' }).waitFor();
  await page.getByLabel('Access token').fill(secret);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('status').filter({ hasText: /^Live$/ }).waitFor();
}

/** The page's storage, as its scripts see it (this file is compiled without the DOM's types). */
type PageStorage = { localStorage: { getItem(key: string): string | null } };

/** A call made by the page's own script, as same-origin as the dashboard's: with the session's proof the page keeps. */
const pageFetch = (page: Page, method: string, path: string, body?: unknown) =>
  page.evaluate(
    async ({ method, path, body }) => {
      const proof = (globalThis as unknown as PageStorage).localStorage.getItem('platform.sessionProof');
      const headers: Record<string, string> = proof === null ? {} : { 'x-platform-session-proof': proof };
      if (body !== undefined) headers['content-type'] = 'application/json';
      const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
      return { status: response.status, body: await response.text() };
    },
    { method, path, body },
  );

const { context: adminContext, page } = await freshPage(`${orchestrator.url}/#/services`);
const row = page.locator(`li[data-service="${service}"]`);

t.test('without a session the page shows the sign-in form and no data, and the data routes answer 401', async (t) => {
  await page.getByRole('heading', { level: 1, name: 'Sign in' }).waitFor();
  t.equal(await page.locator('li.service-row').count(), 0, 'no service is shown');
  t.equal(await page.getByRole('navigation').count(), 0, 'no tabs either');
  for (const path of ['services', 'events', 'cluster/machines', 'session']) t.equal((await pageFetch(page, 'GET', path)).status, 401, path);
  await page.getByLabel('Access token').fill('plt_not-a-token');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByText('the token is unknown or revoked').waitFor();
  t.same(await adminContext.cookies(), [], 'a refused sign-in sets no cookie');
  await shot(page, 'sign-in-1280');
});

t.test('an admin signs in: the cookie is HttpOnly, SameSite=Strict and expires; services show and Deploy runs the units', async (t) => {
  await signIn(page, admin);
  const [cookie] = await adminContext.cookies();
  t.match(cookie, { name: 'platform_session', httpOnly: true, sameSite: 'Strict', secure: false, path: '/' });
  const hours = (cookie!.expires * 1000 - Date.now()) / 3_600_000;
  t.ok(hours > 11.9 && hours <= 12, `it lasts 12 hours (${hours.toFixed(2)})`);
  t.notOk(cookie!.value.includes(admin.slice(4)), 'the cookie holds no secret');
  t.equal(await page.evaluate(() => (globalThis as unknown as { document: { cookie: string } }).document.cookie), '', 'no script can read it');
  await page.getByText('Signed in as bootstrap (admin)').waitFor();
  t.equal(await page.locator('.read-only-note').count(), 0, 'an admin gets no note');
  await row.getByRole('button', { name: `Deploy ${service}` }).click();
  await row.getByRole('img', { name: `${service}-1.service active/running` }).waitFor({ timeout: 90_000 });
  await row.getByText(/^v1 deployed at/).waitFor({ timeout: 30_000 });
  await shot(page, 'signed-in-admin-1280');
});

t.test("the session reads a unit's log tail, through the orchestrator and the agent", async (t) => {
  await row.getByRole('link', { name: service }).click();
  await page.getByRole('button', { name: `Logs of ${service}-1.service` }).click();
  await page.locator('pre.log').getByText(`serving ${service}-1.service on port`).waitFor();
  await page.getByRole('button', { name: 'Close logs' }).click();
  t.pass('the log tail showed the unit output');
});

t.test("a unit on another port of the dashboard's host receives the session cookie but cannot act with it", async (t) => {
  // Cookies belong to a host, not a port: a unit the browser visits on the same host gets the cookie.
  const visit = await adminContext.newPage();
  t.teardown(() => visit.close());
  await visit.goto(`${otherOrigin}/`);
  const received = cookiesReceived.at(-1) ?? '';
  const stolen = /platform_session=([^;]+)/.exec(received)?.[1];
  t.ok(stolen, 'the browser sent the session cookie to the unit');
  // The unit replays it from an address of its own (its failed authentications are counted against that address, not the browser's).
  const unit = new Agent({ localAddress: '127.0.0.9' });
  t.teardown(() => unit.close());
  const replay = async (method: string, url: string, headers: Record<string, string>) => {
    const reply = await undiciFetch(url, { method, dispatcher: unit, headers, body: method === 'POST' ? '{}' : undefined });
    return { status: reply.status, body: (await reply.json()) as { message?: string } };
  };
  const replays: Record<string, Record<string, string>> = {
    'the cookie': { cookie: `platform_session=${stolen}` },
    'the cookie passed on as a header': { authorization: `Session ${stolen}` },
  };
  for (const [what, headers] of Object.entries(replays)) {
    for (const url of [`${orchestrator.url}/services`, `${web.url}/services`, `${orchestrator.url}/session`]) {
      const refusal = { status: 401, body: { message: /^the session cookie alone is not a credential/ } };
      t.match(await replay('GET', url, headers), refusal, `${what} replayed at ${url}`);
    }
    const fromDashboardPage = { ...headers, origin: orchestrator.url, 'content-type': 'application/json' };
    const deploy = await replay('POST', `${orchestrator.url}/services/${service}/deploy`, fromDashboardPage);
    t.equal(deploy.status, 401, `${what} cannot deploy`);
  }
  t.equal((await pageFetch(page, 'GET', 'services')).status, 200, "the dashboard's own page still calls with its session");
});

t.test('a read session sees Deploy, Roll back and Delete off with a note why, and the API refuses them anyway', async (t) => {
  // A second release, so v1 has a Roll back button.
  t.equal((await http('PATCH', `${orchestrator.url}/services/${service}/config/next`, { env: { COLOUR: 'blue' } }, bearer(admin))).status, 200);
  t.equal((await http('POST', `${orchestrator.url}/services/${service}/deploy`, {}, bearer(admin))).status, 200);
  const { context, page: reader } = await freshPage(`${orchestrator.url}/#/services`);
  t.teardown(() => context.close());
  await signIn(reader, viewer);
  const note = reader.getByRole('note');
  t.match(await note.textContent(), /viewer, whose token can only read: Deploy, Roll back, Delete and New service are off/);
  const deploy = reader.getByRole('button', { name: `Deploy ${service}` }).first();
  t.ok(await deploy.isDisabled(), 'Deploy is off');
  t.equal(await deploy.getAttribute('title'), 'your token can only read');
  t.ok(await reader.getByRole('button', { name: 'New service' }).isDisabled(), 'New service is off');
  await shot(reader, 'read-only-1280');

  await reader.goto(`${orchestrator.url}/#/services/${service}`);
  await reader.getByRole('heading', { level: 1, name: service }).waitFor();
  const rollback = reader.getByRole('button', { name: `Roll back ${service} to v1` });
  await rollback.waitFor({ timeout: 60_000 });
  t.ok(await rollback.isDisabled(), 'Roll back is off');
  t.ok(await reader.getByRole('button', { name: 'Delete service' }).isDisabled(), 'Delete is off');
  await shot(reader, 'read-only-service-page-1280');

  const refused = await pageFetch(reader, 'POST', `services/${service}/deploy`, {});
  t.equal(refused.status, 403);
  t.equal(JSON.parse(refused.body).message, 'token viewer has the read role; this call needs deploy');
  t.equal((await pageFetch(reader, 'DELETE', `services/${service}`)).status, 403, 'delete too');
  t.match(JSON.parse((await pageFetch(reader, 'GET', 'session')).body), { via: 'session', token: { name: 'viewer', role: 'read' }, expiresAt: /^20/ });
});

t.test('a page of another origin cannot deploy with the session: its form is refused 403 naming the rule, its script cannot call', async (t) => {
  const before = (await http('GET', `${orchestrator.url}/deployments`, undefined, bearer(admin))).body.length as number;
  const other = await adminContext.newPage();
  t.teardown(() => other.close());
  await other.goto(`${otherOrigin}/`);
  // Another port of the same host is the same site: the SameSite=Strict cookie goes along, and the Origin rule refuses.
  await Promise.all([other.waitForURL(`${orchestrator.url}/services/${service}/deploy`), other.getByRole('button', { name: 'Deploy it' }).click()]);
  const reply = JSON.parse((await other.locator('body').textContent()) ?? '{}');
  t.equal(reply.statusCode, 403);
  t.equal(reply.message, `a change made from a browser must come from a page of this server (${orchestrator.url.slice(7)}), not ${otherOrigin}; --cors-origin allows others`);
  await other.goto(`${otherOrigin}/`);
  const script = await other.evaluate(async (url) => {
    try {
      const response = await fetch(url, { method: 'POST', credentials: 'include', headers: { 'content-type': 'application/json' }, body: '{}' });
      return `answered ${response.status}`;
    } catch (error) {
      return `failed: ${(error as Error).message}`;
    }
  }, `${orchestrator.url}/services/${service}/deploy`);
  t.match(script, /^failed/, 'without CORS the browser does not even send a JSON call (its preflight gets no consent)');
  const read = await other.evaluate((url) => fetch(url, { credentials: 'include' }).then(() => 'read', () => 'refused'), `${orchestrator.url}/services`);
  t.equal(read, 'refused', 'nor read a reply');
  t.equal((await http('GET', `${orchestrator.url}/deployments`, undefined, bearer(admin))).body.length, before, 'nothing was deployed');

  // --cors-origin opts that origin in, on the orchestrator started with it: its page signs in there
  // (in a profile of its own, as signing in replaces the host's one cookie) and sends the proof it got.
  const { context: optedIn, page: opted } = await freshPage(`${otherOrigin}/`);
  t.teardown(() => optedIn.close());
  const allowed = await opted.evaluate(
    async ({ base, token }) => {
      const json = { 'content-type': 'application/json' };
      const signIn = await fetch(`${base}/session`, { method: 'POST', credentials: 'include', headers: json, body: JSON.stringify({ token }) });
      const { proof } = (await signIn.json()) as { proof: string };
      const response = await fetch(`${base}/session`, { credentials: 'include', headers: { 'x-platform-session-proof': proof } });
      const cookieAlone = await fetch(`${base}/session`, { credentials: 'include' });
      return { status: response.status, body: await response.json(), cookieAlone: cookieAlone.status, proof };
    },
    { base: corsOrchestrator.url, token: admin },
  );
  t.match(allowed, { status: 200, body: { via: 'session', token: { name: 'bootstrap' } }, cookieAlone: 401 }, 'the opted-in origin reads with its session');
  const preflighted = await opted.evaluate(
    async ({ url, proof }) => {
      const headers = { 'content-type': 'application/json', 'x-platform-session-proof': proof };
      const response = await fetch(url, { method: 'PATCH', credentials: 'include', headers, body: JSON.stringify({ env: { FROM: 'ops' } }) });
      return response.status;
    },
    { url: `${corsOrchestrator.url}/services/${service}/config/next`, proof: allowed.proof },
  );
  t.equal(preflighted, 200, 'and changes, after a preflight');
});

t.test('the standalone web role signs in the same way and passes the session on to the orchestrator', async (t) => {
  // Another origin than the orchestrator's page: its storage holds no proof of that session, so it signs in itself.
  const { context, page: webPage } = await freshPage(`${web.url}/#/services`);
  t.teardown(() => context.close());
  await signIn(webPage, admin);
  await webPage.locator(`li[data-service="${service}"]`).waitFor();
  t.match(JSON.parse((await pageFetch(webPage, 'GET', 'session')).body), { via: 'session', token: { name: 'bootstrap' } });
  const patched = await pageFetch(webPage, 'PATCH', `services/${service}/config/next`, { env: { COLOUR: 'green' } });
  t.equal(patched.status, 200, 'a change through the web role is checked by the orchestrator as the session');
  const journal = (await http('GET', `${orchestrator.url}/journal?service=${service}`, undefined, bearer(admin))).body as { kind: string; actor?: { token?: string } }[];
  t.ok(journal.some((entry) => entry.kind === 'config.changed' && entry.actor?.token === 'bootstrap'), 'the journal names the session’s token');
  const elsewhere = await webPage.evaluate(async (url) => {
    const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: '{}' });
    return { status: response.status, body: await response.json() };
  }, `${web.url}/services/${service}/deploy`);
  t.match(elsewhere, { status: 403, body: { message: /must send Content-Type: application\/json, not text\/plain/ } }, 'the web role holds its callers to the CSRF rule before passing them on');
});

/** A followed log tail of the service's unit, opened with `headers`; `ended` resolves `ended` when the server ends it cleanly. */
async function followedLog(t: Test, url: string, headers: Record<string, string>): Promise<{ ended: Promise<string> }> {
  const response = await fetch(url, { headers });
  t.equal(response.status, 200, `a followed log opens at ${url}`);
  const reader = response.body!.getReader();
  let text = '';
  while (!/serving .*-1\.service on port/.test(text)) {
    const chunk = await reader.read();
    if (chunk.done) break;
    text += new TextDecoder().decode(chunk.value);
  }
  t.match(text, /serving .*-1\.service on port/, 'and sends the unit output');
  const rest = (async () => {
    for (;;) if ((await reader.read()).done) return 'ended';
  })();
  return { ended: rest.catch(() => 'broken') };
}

/** Each stream ends (cleanly) within 10 s. */
async function allEnd(t: Test, streams: Record<string, Promise<string>>): Promise<void> {
  for (const [what, ended] of Object.entries(streams)) {
    const outcome = await Promise.race([ended, sleep(10_000).then(() => 'still open')]);
    t.equal(outcome, 'ended', `${what} ended (${outcome})`);
  }
}

const unitLogPaths = () => ({
  'the log followed through the orchestrator': `${orchestrator.url}/services/${service}/units/${service}-1.service/logs?follow=true&tail=5`,
  'the log followed at the agent': `${agent.url}/units/${service}-1.service/logs?follow=true&tail=5`,
});

t.test('revoking the token ends its session at once, its open event stream and followed logs too', async (t) => {
  const { context, page: reader } = await freshPage(`${orchestrator.url}/#/services`);
  t.teardown(() => context.close());
  const brief = (await http('POST', `${orchestrator.url}/tokens`, { name: 'brief', role: 'read' }, bearer(admin))).body.secret as string;
  await signIn(reader, brief);
  t.equal((await pageFetch(reader, 'GET', 'services')).status, 200);
  const logs: Record<string, Promise<string>> = {};
  for (const [what, url] of Object.entries(unitLogPaths())) logs[what] = (await followedLog(t, url, bearer(brief))).ended;
  const since = Date.now();
  t.equal((await http('DELETE', `${orchestrator.url}/tokens/brief`, undefined, bearer(admin))).status, 204);
  await allEnd(t, logs);
  // The orchestrator ends the page's stream; the page asks who it is, is refused, and starts again at the sign-in form.
  await reader.getByText('The session ended: token brief was revoked.').waitFor({ timeout: 10_000 });
  t.comment(`the sign-in form was back ${Date.now() - since} ms after the revocation`);
  await reader.getByRole('heading', { level: 1, name: 'Sign in' }).waitFor();
  t.same(await context.cookies(), [], 'the refused cookie is cleared');
  t.equal((await pageFetch(reader, 'GET', 'services')).status, 401);
  await shot(reader, 'session-ended-1280');
});

t.test('signing out shows the sign-in page again, and the data routes answer 401', async (t) => {
  await page.goto(`${orchestrator.url}/#/services`);
  await page.getByRole('status').filter({ hasText: /^Live$/ }).waitFor();
  // A copy of the whole session (the cookie and its proof), as a stolen one would be, with an event stream it keeps open.
  const cookie = `platform_session=${(await adminContext.cookies()).find((cookie) => cookie.name === 'platform_session')!.value}`;
  const proof = await page.evaluate(() => (globalThis as unknown as PageStorage).localStorage.getItem('platform.sessionProof'));
  const copy = { cookie, 'x-platform-session-proof': proof! };
  const stream = await fetch(`${orchestrator.url}/events`, { headers: copy });
  t.equal(stream.status, 200, 'the copy opens a stream');
  const streamEnded = stream.text().then(() => 'ended', () => 'ended');
  const logs: Record<string, Promise<string>> = {};
  for (const [what, url] of Object.entries(unitLogPaths())) logs[what] = (await followedLog(t, url, copy)).ended;
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByRole('heading', { level: 1, name: 'Sign in' }).waitFor();
  t.same(await adminContext.cookies(), [], 'the cookie is gone');
  t.equal(await page.evaluate(() => (globalThis as unknown as PageStorage).localStorage.getItem('platform.sessionProof')), null, 'and the proof');
  for (const path of ['services', 'events', 'session']) t.equal((await pageFetch(page, 'GET', path)).status, 401, path);
  t.equal((await pageFetch(page, 'POST', `services/${service}/deploy`, {})).status, 401, 'and changes too');
  // Signing out ends the session everywhere: the copy is refused by every role that serves the API, and its stream ends.
  for (const url of [`${orchestrator.url}/services`, `${web.url}/services`]) {
    const reply = await http('GET', url, undefined, copy);
    t.match(reply, { status: 401, body: { message: 'the session was signed out: sign in again' } }, `a copy of the cookie at ${url}`);
  }
  await allEnd(t, { "the copy's event stream": streamEnded, ...logs });
});

t.test("one client's failed tokens through the web role slow that client, not every dashboard user", async (t) => {
  // Browsers reach the web role through the gateway, which adds X-Forwarded-For: the web role
  // believes it from a process of the platform's own user (as this test is), names that client
  // to the orchestrator, signed, and the orchestrator counts failures against it.
  const from = (localAddress: string) => new Agent({ localAddress });
  const [guesser, bystander] = [from('127.0.0.2'), from('127.0.0.3')];
  t.teardown(() => Promise.all([guesser.close(), bystander.close()]));
  const viaGateway = async (dispatcher: Agent, client: string, authorization: string) => {
    const reply = await undiciFetch(`${web.url}/services`, { dispatcher, headers: { authorization, 'x-forwarded-for': client } });
    const body = (await reply.json()) as { message?: string };
    return { status: reply.status, message: body.message };
  };
  const statuses: number[] = [];
  for (let i = 0; i < 21; i += 1) statuses.push((await viaGateway(guesser, '203.0.113.7', `Bearer plt_wrong-${i}`)).status);
  t.same(statuses, [...Array(20).fill(401), 429], 'the guesser is refused after 20 failures');
  t.match(await viaGateway(guesser, '203.0.113.7', `Bearer ${admin}`), { status: 429, message: /too many failed authentications from 203\.0\.113\.7:/ }, 'even with a good token, for a minute');
  t.match(await viaGateway(bystander, '203.0.113.8', `Bearer ${admin}`), { status: 200 }, 'another client of the same web role is not');
});

t.test('the pages raised no script error', async (t) => {
  t.same(pageErrors, []);
  await adminContext.close();
});
